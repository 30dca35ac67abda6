package movepart

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/clickhouse"
)

// Request asks for a move or an attach of one partition.
type Request struct {
	Kind      Kind
	From, To  TableRef
	Partition string // partition id, as system.parts.partition_id shows it
}

// Plan is a checked request: the record the move will start from and what
// it will do, for a dry run.
type Plan struct {
	Record
	Parts []clickhouse.Part // the source's active parts in the partition
	Rows  uint64
	Bytes uint64
	// Statements lists, in order, what the move will do on each keeper
	// shard and ClickHouse server.
	Statements []string
	// Notes say what the plan assumed (a table's shard by default).
	Notes []string
}

// ErrRefused marks a request the plan refuses: nothing was changed.
var ErrRefused = errors.New("movepart: refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

// Plan checks a request against the cluster file, both shards and both
// ClickHouse servers and returns what the move will do. It changes nothing.
func (m *Mover) Plan(ctx context.Context, req Request) (*Plan, error) {
	if req.Kind != Move && req.Kind != Attach {
		return nil, refuse("unknown kind %q (move or attach)", req.Kind)
	}
	if req.Partition == "" {
		return nil, refuse("no partition id given")
	}
	if req.From == req.To {
		return nil, refuse("source and destination are the same table, %s", req.From)
	}
	p := &Plan{Record: Record{ID: uuid.NewString(), Kind: req.Kind, Partition: req.Partition}}
	p.Staging = StagingName(p.ID)
	src, err := m.table(ctx, req.From)
	if err != nil {
		return nil, err
	}
	dst, err := m.table(ctx, req.To)
	if err != nil {
		return nil, err
	}
	if p.Source, err = m.endpoint(ctx, p, req.From, src, true); err != nil {
		return nil, err
	}
	if p.Destination, err = m.endpoint(ctx, p, req.To, dst, false); err != nil {
		return nil, err
	}
	if s, d := p.Source, p.Destination; s.ZooKeeperPath != "" && s.ZooKeeperPath == d.ZooKeeperPath && s.Shard == d.Shard {
		return nil, refuse("%s and %s are one table: both are replicas of keeper path %s on shard %s", req.From, req.To, s.ZooKeeperPath, s.Shard)
	}
	if err := clickhouse.Compatible(src, dst); err != nil {
		return nil, refuse("%s and %s: %w", req.From, req.To, err)
	}
	for _, e := range []Endpoint{p.Source, p.Destination} {
		if err := m.notLocked(ctx, e, req.Partition); err != nil {
			return nil, err
		}
	}
	for _, part := range p.Parts {
		p.Rows += part.Rows
		p.Bytes += part.Bytes
	}
	p.Statements = m.statements(p, dst)
	return p, nil
}

// endpoint resolves a table's shard, checks that the shard answers and
// reads the table's parts and fingerprint of the partition. The source
// must have the partition; its parts go to p.Parts. A replicated table is
// read through a replica that holds every part of the partition its
// replica set holds (settled), which becomes the endpoint's server.
func (m *Mover) endpoint(ctx context.Context, p *Plan, t TableRef, tab *clickhouse.Table, source bool) (Endpoint, error) {
	e := Endpoint{TableRef: t, LegacySyntax: tab.LegacySyntax, MergesChangeRows: tab.MergesChangeRows()}
	if _, err := m.cluster.ClickHouseServer(t.Server); err != nil {
		return e, refuse("%w", err)
	}
	sh, err := m.cluster.TableShard(t.Server, t.Database, t.Table)
	if err != nil {
		if len(m.cluster.Shards) == 0 {
			return e, refuse("%w", err)
		}
		sh = &m.cluster.Shards[0]
		p.Notes = append(p.Notes, fmt.Sprintf("%s: no entry of tables names it, its database or its server; its records go to the first shard, %s", t, sh.Name))
	}
	e.Shard = sh.Name
	if _, err := m.store.Children(ctx, e.Shard, Root); err != nil {
		return e, refuse("keeper shard %s of %s does not answer: %w", e.Shard, t, err)
	}
	if tab.Replicated {
		server, err := m.settled(ctx, t, tab, p.Partition)
		if err != nil {
			return e, err
		}
		if server != t.Server {
			p.Notes = append(p.Notes, fmt.Sprintf("%s: read and changed through replica %s, which holds every part of partition %s that its replicas hold", t, server, p.Partition))
			e.Server, t.Server = server, server
		}
		e.ZooKeeperPath, e.FencePrefix = tab.ZooKeeperPath, clickhouse.PartPrefix(p.Partition, tab.LegacySyntax)
	}
	c, err := m.Conn(ctx, t.Server)
	if err != nil {
		return e, refuse("%w", err)
	}
	parts, err := c.Parts(ctx, t.Database, t.Table, p.Partition)
	switch {
	case errors.Is(err, clickhouse.ErrNoPartition) && !source:
	case err != nil:
		return e, refuse("%w", err)
	}
	e.Parts = parts
	if source {
		p.Parts = parts
	}
	if e.Fingerprint, err = c.Fingerprint(ctx, t.Database, t.Table, p.Partition); err != nil {
		return e, refuse("%w", err)
	}
	return e, nil
}

func (m *Mover) table(ctx context.Context, t TableRef) (*clickhouse.Table, error) {
	c, err := m.Conn(ctx, t.Server)
	if err != nil {
		return nil, refuse("%w", err)
	}
	tab, err := c.Table(ctx, t.Database, t.Table)
	if err != nil {
		return nil, refuse("%w", err)
	}
	if !tab.MergeTree() {
		return nil, refuse("%s has engine %s; only MergeTree-family tables have movable partitions", t, tab.Engine)
	}
	return tab, nil
}

// notLocked refuses a partition another move holds (the intent would fail
// too; this says so before anything is written, and in a dry run).
func (m *Mover) notLocked(ctx context.Context, e Endpoint, partition string) error {
	data, _, found, err := m.store.Get(ctx, e.Shard, LocksDir+"/"+e.lockName(partition))
	if err != nil {
		return refuse("keeper shard %s of %s: %w", e.Shard, e.TableRef, err)
	}
	if found {
		var l Lock
		_ = decodeJSON(data, &l)
		return fmt.Errorf("%w: partition %s of %s is being moved by move %s", ErrBusy, partition, e.TableRef, l.Move)
	}
	return nil
}

// statements describes the move step by step.
func (m *Mover) statements(p *Plan, dst *clickhouse.Table) []string {
	src, d := p.Source, p.Destination
	part := fmt.Sprintf("PARTITION ID '%s'", p.Partition)
	staging := d.Database + "." + p.Staging
	shards := strings.Join(p.Shards(), ", ")
	on := func(server, s string) string { return server + ": " + s }
	out := []string{
		fmt.Sprintf("keeper %s: create move record %s/%s and lock %s of %s and of %s%s", shards, MovesDir, p.ID, part, src.TableRef, d.TableRef, fences(src, d)),
		on(d.Server, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s, MergeTree with the structure of %s.%s (%s)", staging, d.Database, d.Table, dst.Engine)),
	}
	if src.Server == d.Server {
		out = append(out, on(d.Server, fmt.Sprintf("ALTER TABLE %s REPLACE %s FROM %s.%s", staging, part, src.Database, src.Table)))
	} else {
		out = append(out, on(d.Server, fmt.Sprintf("INSERT INTO %s SELECT ... FROM remote('%s', %s, %s) WHERE _partition_id = '%s' (%d rows)",
			staging, m.address(src.Server), src.Database, src.Table, p.Partition, src.Fingerprint.Rows)))
	}
	if d.Fingerprint.Rows > 0 {
		out = append(out, on(d.Server, fmt.Sprintf("ALTER TABLE %s ATTACH %s FROM %s.%s (keeps its %d rows)", staging, part, d.Database, d.Table, d.Fingerprint.Rows)))
	}
	want := p.Expected()
	out = append(out,
		on(d.Server, fmt.Sprintf("verify %s: %d rows, hash %016x; source and destination unchanged", staging, want.Rows, want.Hash)),
		fmt.Sprintf("keeper %s: record step staged, then committed (the commit point)", shards),
		on(d.Server, fmt.Sprintf("ALTER TABLE %s.%s REPLACE %s FROM %s", d.Database, d.Table, part, staging)))
	if p.Kind == Move {
		out = append(out, on(src.Server, fmt.Sprintf("ALTER TABLE %s.%s DROP %s", src.Database, src.Table, part)))
	}
	out = append(out,
		"wait for the replicas of replicated tables",
		fmt.Sprintf("keeper %s: record step applied", shards),
		on(d.Server, "DROP TABLE IF EXISTS "+staging),
		fmt.Sprintf("keeper %s: delete record and locks, add a journal entry", shards))
	return out
}

// fences describes the part fences of the replicated tables among es.
func fences(es ...Endpoint) string {
	var out []string
	for _, e := range es {
		if e.ZooKeeperPath != "" {
			out = append(out, e.TableRef.String())
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ", and fence the partition's parts of " + strings.Join(out, " and ") + " (no replica adds one until the apply has run)"
}

func (m *Mover) address(server string) string {
	if s, err := m.cluster.ClickHouseServer(server); err == nil {
		return s.Address
	}
	return server
}
