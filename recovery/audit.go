package recovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
)

// Kind classifies a finding.
type Kind string

// What an audit finds.
const (
	UnfinishedMove     Kind = "unfinished-move"      // a move record exists
	InconsistentMove   Kind = "inconsistent-move"    // a move's record is on one of its shards only
	PartitionInBoth    Kind = "partition-in-both"    // a moved partition is in source and destination
	PartitionMissing   Kind = "partition-missing"    // a moved partition is in neither table
	PartitionShrunk    Kind = "partition-shrunk"     // a moved partition holds fewer rows than the move put there
	StrayLock          Kind = "stray-lock"           // a partition lock whose move is gone
	StrayFence         Kind = "stray-fence"          // a part fence whose move is gone: inserts into its partition are refused
	StrayStaging       Kind = "stray-staging"        // a staging table whose move is gone
	InDoubtTransaction Kind = "in-doubt-transaction" // a cross-shard transaction undecided past its deadline
	StaleTransaction   Kind = "stale-transaction"    // a decided one not cleaned up long after its deadline
	Unreachable        Kind = "unreachable"          // a shard or server that did not answer
	// OpenACL: with security.auth set, znodes under /xkeeper whose ACL is
	// not its digest's alone (created before it was set, or changed since).
	// Without security.auth every znode of xkeeper's is open by design:
	// the audit logs a warning instead of a finding.
	OpenACL Kind = "open-acl"
	// Findings of the S3 object catalog (package movepart/objects) are its
	// kinds with this prefix, as in "s3-orphan".
	S3Prefix = "s3-"
)

// Finding is one thing an audit found.
type Finding struct {
	Kind      Kind   `json:"kind"`
	Move      string `json:"move,omitempty"`
	Shard     string `json:"shard,omitempty"`
	Server    string `json:"server,omitempty"`
	Table     string `json:"table,omitempty"`
	Partition string `json:"partition,omitempty"`
	Node      string `json:"node,omitempty"` // a stray lock's znode name
	Detail    string `json:"detail"`
	// Action is what Recover does about it ("" when it does nothing).
	Action string `json:"action,omitempty"`
	// ID names the finding the same way in every audit while it lasts, for
	// acknowledging it.
	ID string `json:"id"`
	// History marks a finding about a move finished earlier (from the
	// journal), as opposed to work in flight: nothing recover does.
	History bool `json:"history,omitempty"`
	// AgedOut marks a history finding older than audit.journal_max_age.
	AgedOut bool `json:"aged_out,omitempty"`
	// Acknowledged says who acknowledged a history finding, and when.
	Acknowledged *Ack `json:"acknowledged,omitempty"`
}

// Settled reports whether the finding no longer counts: acknowledged or
// aged out.
func (f Finding) Settled() bool { return f.Acknowledged != nil || f.AgedOut }

// Report is an audit's result.
type Report struct {
	Shards   int       `json:"shards"`
	Servers  int       `json:"servers"`
	Moves    int       `json:"moves_in_flight"`
	Journal  int       `json:"journal_entries"`
	Findings []Finding `json:"findings"`
}

// Open returns the findings that count: those not acknowledged nor aged
// out.
func (r *Report) Open() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if !f.Settled() {
			out = append(out, f)
		}
	}
	return out
}

// Clean reports whether every finding is settled (there may be none).
func (r *Report) Clean() bool { return len(r.Open()) == 0 }

// transactionGrace is how long past its deadline a cross-shard transaction
// record may stay before the audit reports it: the shards' own recovery
// ends and cleans up every transaction within moments of its deadline.
const transactionGrace = 5000 // ms of official time

// Auditor reads the cluster's shards and servers.
type Auditor struct {
	m      *movepart.Mover
	report *Report
	// partitions caches each table's partitions (rows by partition id).
	partitions map[movepart.TableRef]map[string]uint64
}

// Audit reads every shard and every ClickHouse server of m's cluster and
// reports what is wrong. An error means the audit could not run at all; a
// shard or server that does not answer is a finding.
func Audit(ctx context.Context, m *movepart.Mover) (*Report, error) {
	a := &Auditor{m: m, report: &Report{}, partitions: map[movepart.TableRef]map[string]uint64{}}
	var err error
	cluster := m.Store().Router().Cluster()
	a.report.Shards, a.report.Servers = len(cluster.Shards), len(cluster.ClickHouse.Servers)
	// Locks and staging tables are listed before the moves: a move that
	// starts in between then shows up as live, never as a stray.
	locks := map[string]map[string]movepart.Lock{}
	fences := map[string]map[string]string{}
	for _, sh := range cluster.Shards {
		if locks[sh.Name], err = m.Store().Locks(ctx, sh.Name); err != nil {
			a.add(Finding{Kind: Unreachable, Shard: sh.Name, Detail: err.Error()})
		}
		if fences[sh.Name], err = m.Store().Fences(ctx, sh.Name); err != nil {
			a.add(Finding{Kind: Unreachable, Shard: sh.Name, Detail: err.Error()})
		}
	}
	staging := map[string][]clickhouse.TableName{}
	for _, s := range cluster.ClickHouse.Servers {
		staging[s.Name] = a.stagingTables(ctx, s.Name)
	}
	moves, err := m.Store().Moves(ctx)
	if err != nil {
		a.add(Finding{Kind: Unreachable, Detail: err.Error()})
	}
	a.report.Moves = len(moves)
	live := map[string]bool{}
	for _, rec := range moves {
		live[rec.ID] = true
		a.move(ctx, rec)
	}
	for _, sh := range cluster.Shards {
		a.strayLocks(sh.Name, locks[sh.Name], live)
		a.strayFences(sh.Name, fences[sh.Name], live)
		a.journal(ctx, sh.Name)
		a.transactions(ctx, sh.Name)
		a.acls(ctx, sh.Name)
	}
	if !m.Store().Protected() {
		m.Store().Logger().Warn("security.auth is not set: xkeeper's znodes (/xkeeper/...) are open to every client of the shards, " +
			"which can change or delete moves, locks and the object catalog; set security.auth and run xkeeper recover --commit")
	}
	for _, s := range cluster.ClickHouse.Servers {
		a.strayStaging(s.Name, staging[s.Name], live)
	}
	if cluster.S3.Endpoint != "" {
		a.objects(ctx)
	}
	a.acknowledgements(ctx)
	return a.report, nil
}

// objects lists the bucket against every shard's object catalog.
func (a *Auditor) objects(ctx context.Context) {
	r := a.m.Store().Router()
	b, err := objects.OpenS3(ctx, r.Cluster().S3)
	var rep *objects.AuditReport
	if err == nil {
		rep, err = objects.New(r, b, nil).Audit(ctx)
	}
	if err != nil {
		a.add(Finding{Kind: Unreachable, Detail: err.Error()})
		return
	}
	for _, f := range rep.Findings {
		fd := Finding{Kind: Kind(S3Prefix + f.Kind), Detail: f.Key + ": " + f.Detail, ID: S3Prefix + f.Kind + "/" + f.Key}
		if f.Kind == objects.Orphan {
			fd.Action = "none here: xkeeper s3 gc --commit deletes it"
		}
		a.add(fd)
	}
}

// add records a finding, naming it by its kind and what it is about.
func (a *Auditor) add(f Finding) {
	if f.ID == "" {
		parts := []string{string(f.Kind)}
		for _, p := range []string{f.Move, f.Shard, f.Server, f.Table, f.Partition, f.Node} {
			if p != "" {
				parts = append(parts, p)
			}
		}
		f.ID = strings.Join(parts, "/")
	}
	a.report.Findings = append(a.report.Findings, f)
}

// move reports a move in flight, what recover would do, and where its
// partition is when that is wrong.
func (a *Auditor) move(ctx context.Context, rec *movepart.Record) {
	f := Finding{Kind: UnfinishedMove, Move: rec.ID, Shard: rec.Source.Shard, Table: rec.Source.String(), Partition: rec.Partition,
		Detail: fmt.Sprintf("%s of partition %s from %s to %s at step %s since %s", rec.Kind, rec.Partition, rec.Source.TableRef,
			rec.Destination.TableRef, rec.Step, rec.Created().UTC().Format("2006-01-02 15:04:05"))}
	if rec.LastError != "" {
		f.Detail += "; last error: " + rec.LastError
	}
	if rec.Problem() != "" {
		a.add(Finding{Kind: InconsistentMove, Move: rec.ID, Shard: rec.Source.Shard, Detail: rec.Problem(),
			Action: "none: an operator must restore or remove the record"})
	}
	if rec.Step.Forward() {
		f.Action = "finish it (roll forward)"
	} else {
		f.Action = "roll it back"
	}
	if o, found, err := a.m.Store().OwnerOf(ctx, rec.Source.Shard, rec.ID); err == nil && found {
		f.Action = "wait: driven by " + o.String() + "; then " + f.Action
	}
	a.add(f)
	src, srcErr := a.rows(ctx, rec.Source.TableRef, rec.Partition)
	dst, dstErr := a.rows(ctx, rec.Destination.TableRef, rec.Partition)
	if srcErr != nil || dstErr != nil {
		return
	}
	switch {
	case src == 0 && dst == 0:
		a.add(Finding{Kind: PartitionMissing, Move: rec.ID, Table: rec.Source.String(), Partition: rec.Partition,
			Detail: fmt.Sprintf("partition %s is in neither %s nor %s (move at step %s)", rec.Partition, rec.Source.TableRef, rec.Destination.TableRef, rec.Step)})
	case rec.Kind == movepart.Move && rec.Step.Forward() && src > 0 && dst >= rec.Expected().Rows:
		f := Finding{Kind: PartitionInBoth, Move: rec.ID, Table: rec.Source.String(), Partition: rec.Partition,
			Detail: fmt.Sprintf("partition %s is in %s (%d rows) and in %s (%d rows); the move is committed", rec.Partition, rec.Source.TableRef, src, rec.Destination.TableRef, dst),
			Action: "drop it from the source (finishing the move)"}
		if !rec.Source.Fenced() && !a.holdsPlanned(ctx, rec.Source, rec.Partition) {
			f.Action = "none: the source holds rows the move did not copy (written after its commit point); an operator must keep or move them before the move can finish"
		}
		a.add(f)
	}
}

// holdsPlanned reports whether e's partition holds what the move planned
// (its fingerprint): rows recover may drop.
func (a *Auditor) holdsPlanned(ctx context.Context, e movepart.Endpoint, partition string) bool {
	c, err := a.m.Conn(ctx, e.Server)
	if err != nil {
		return false
	}
	f, err := c.Fingerprint(ctx, e.Database, e.Table, partition)
	return err == nil && f == e.Fingerprint
}

// journal checks the finished moves a shard remembers: a moved partition
// must be in the destination and, for a move, gone from the source.
func (a *Auditor) journal(ctx context.Context, shard string) {
	entries, err := a.m.Store().Journal(ctx, shard)
	if err != nil {
		a.add(Finding{Kind: Unreachable, Shard: shard, Detail: err.Error()})
		return
	}
	maxAge := a.m.Store().Router().Cluster().Audit.MaxAge()
	for _, e := range entries {
		if e.Source.Shard != shard {
			continue // checked from the source's shard, which has it too
		}
		a.report.Journal++
		src, srcErr := a.setRows(ctx, e.Source, e.Partition)
		dst, dstErr := a.setRows(ctx, e.Destination, e.Partition)
		if srcErr != nil || dstErr != nil {
			continue
		}
		ended := e.Finished.UTC().Format("2006-01-02 15:04:05")
		aged := time.Since(e.Finished) > maxAge
		switch want := e.Expected().Rows; {
		case e.Kind == movepart.Move && src > 0 && dst > 0:
			a.add(Finding{Kind: PartitionInBoth, Move: e.ID, Table: e.Source.String(), Partition: e.Partition, History: true, AgedOut: aged,
				Detail: fmt.Sprintf("partition %s, moved from %s to %s at %s, is in both tables now (%d and %d rows)", e.Partition, e.Source.TableRef, e.Destination.TableRef, ended, src, dst)})
		case dst == 0 && (e.Kind == movepart.Attach || src == 0):
			a.add(Finding{Kind: PartitionMissing, Move: e.ID, Table: e.Destination.String(), Partition: e.Partition, History: true, AgedOut: aged,
				Detail: fmt.Sprintf("partition %s, %s from %s to %s at %s, is no longer in %s (dropped since, or lost)", e.Partition, pastTense(e.Kind), e.Source.TableRef, e.Destination.TableRef, ended, e.Destination.TableRef)})
		case dst > 0 && dst < want && !a.mergesChangeRows(ctx, e.Destination.TableRef):
			a.add(Finding{Kind: PartitionShrunk, Move: e.ID, Table: e.Destination.String(), Partition: e.Partition, History: true, AgedOut: aged,
				Detail: fmt.Sprintf("partition %s, %s from %s to %s at %s, holds %d rows in %s (on its fullest replica), fewer than the %d the move left there: rows lost, or deleted since",
					e.Partition, pastTense(e.Kind), e.Source.TableRef, e.Destination.TableRef, ended, dst, e.Destination.TableRef, want)})
		}
	}
}

// mergesChangeRows reports whether t's merges change its rows (a
// Replacing or Collapsing table holds fewer rows once merged); false when
// its server does not say.
func (a *Auditor) mergesChangeRows(ctx context.Context, t movepart.TableRef) bool {
	c, err := a.m.Conn(ctx, t.Server)
	if err != nil {
		return false
	}
	tab, err := c.Table(ctx, t.Database, t.Table)
	return err == nil && tab.MergesChangeRows()
}

// setRows returns how many rows the replica set of endpoint e holds in
// partition: the most any replica the cluster file names holds (a replica
// that lags holds fewer; the set holds at least that many).
func (a *Auditor) setRows(ctx context.Context, e movepart.Endpoint, partition string) (uint64, error) {
	var most uint64
	for _, t := range a.m.Replicas(ctx, e) {
		n, err := a.rows(ctx, t, partition)
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

// pastTense names what a finished move of kind did: "moved", "attached".
func pastTense(k movepart.Kind) string {
	if k == movepart.Attach {
		return "attached"
	}
	return "moved"
}

// rows returns how many rows table holds in partition (0 for a table that
// does not exist), reading each table's partitions once.
func (a *Auditor) rows(ctx context.Context, t movepart.TableRef, partition string) (uint64, error) {
	parts, ok := a.partitions[t]
	if !ok {
		parts = map[string]uint64{}
		c, err := a.m.Conn(ctx, t.Server)
		var list []clickhouse.Partition
		if err == nil {
			list, err = c.Partitions(ctx, t.Database, t.Table)
		}
		if err != nil && !errors.Is(err, clickhouse.ErrNoTable) {
			a.add(Finding{Kind: Unreachable, Server: t.Server, Table: t.String(), Detail: err.Error()})
			a.partitions[t] = nil
			return 0, err
		}
		for _, p := range list {
			parts[p.ID] = p.Rows
		}
		a.partitions[t] = parts
	}
	if parts == nil {
		return 0, errors.New("unreadable")
	}
	return parts[partition], nil
}

// strayFences reports part fences whose move has no record (fences are
// created and deleted with their move's locks): while one stands, inserts
// into its partition are refused.
func (a *Auditor) strayFences(shard string, fences map[string]string, live map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(fences)) {
		move := fences[name]
		if live[move] {
			continue
		}
		a.add(Finding{Kind: StrayFence, Move: move, Shard: shard, Node: name,
			Detail: fmt.Sprintf("part fence %s/%s on shard %s names move %s, which does not exist: inserts into its partition are refused", proto.PartFencesDir, name, shard, move),
			Action: "delete the fence"})
	}
}

// strayLocks reports locks whose move has no record (a record and its
// locks are created and deleted together).
func (a *Auditor) strayLocks(shard string, locks map[string]movepart.Lock, live map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(locks)) {
		l := locks[name]
		if live[l.Move] {
			continue
		}
		a.add(Finding{Kind: StrayLock, Move: l.Move, Shard: shard, Table: l.Table.String(), Partition: l.Partition, Node: name,
			Detail: fmt.Sprintf("lock %s/%s on shard %s names move %s, which does not exist", movepart.LocksDir, name, shard, l.Move),
			Action: "delete the lock"})
	}
}

// stagingTables lists the staging tables of server.
func (a *Auditor) stagingTables(ctx context.Context, server string) []clickhouse.TableName {
	c, err := a.m.Conn(ctx, server)
	var tables []clickhouse.TableName
	if err == nil {
		tables, err = c.TablesWithPrefix(ctx, movepart.StagingPrefix)
	}
	if err != nil {
		a.add(Finding{Kind: Unreachable, Server: server, Detail: err.Error()})
	}
	return tables
}

// strayStaging reports staging tables whose move does not exist.
func (a *Auditor) strayStaging(server string, tables []clickhouse.TableName, live map[string]bool) {
	for _, t := range tables {
		id, ok := movepart.MoveOfStaging(t.Name)
		if ok && live[id] {
			continue
		}
		a.add(Finding{Kind: StrayStaging, Move: id, Server: server, Table: server + ":" + t.Database + "." + t.Name,
			Detail: fmt.Sprintf("staging table %s.%s on %s belongs to no move in flight", t.Database, t.Name, server),
			Action: "drop the table"})
	}
}

// transactions reports cross-shard transaction records well past their
// deadline: undecided ones (in doubt) and decided ones not cleaned up.
func (a *Auditor) transactions(ctx context.Context, shard string) {
	var list proto.XListResponse
	if err := a.m.Store().Router().Do(ctx, shard, proto.OpXList, proto.Empty{}, &list); err != nil {
		a.add(Finding{Kind: Unreachable, Shard: shard, Detail: err.Error()})
		return
	}
	for _, r := range list.Records {
		if list.Time <= r.Deadline+transactionGrace {
			continue
		}
		f := Finding{Kind: StaleTransaction, Shard: shard, Detail: fmt.Sprintf("cross-shard transaction %s (coordinator %s, shards %v) is %v, %d ms past its deadline",
			r.ID, r.Coordinator, r.Shards, r.Status, list.Time-r.Deadline)}
		if r.Status == proto.XPending {
			f.Kind = InDoubtTransaction
		}
		a.add(f)
	}
}

// acls reports the znodes under /xkeeper of shard that security.auth does
// not protect alone; nothing without security.auth (see OpenACL).
func (a *Auditor) acls(ctx context.Context, shard string) {
	s := a.m.Store()
	if !s.Protected() {
		return
	}
	var n, refused int
	var examples []string
	err := s.ForeignACLs(ctx, shard, func(path string, acl []proto.ACL, _ int32) error {
		n++
		if acl == nil {
			refused++
		}
		if len(examples) < 3 {
			examples = append(examples, path+" ("+describeACL(acl)+")")
		}
		return nil
	})
	if err != nil {
		a.add(Finding{Kind: Unreachable, Shard: shard, Detail: err.Error()})
		return
	}
	if n == 0 {
		return
	}
	f := Finding{Kind: OpenACL, Shard: shard, Action: "set their ACL to security.auth's digest",
		Detail: fmt.Sprintf("%d znodes under %s on shard %s have another ACL than security.auth's digest, e.g. %s",
			n, movepart.Root, shard, strings.Join(examples, ", "))}
	if refused > 0 {
		f.Action = fmt.Sprintf("set their ACL to security.auth's digest (%d refuse security.auth: only the super digest can change them)", refused)
	}
	a.add(f)
}

// describeACL renders an ACL as "scheme:id PERMS, ..." (nil: unreadable).
func describeACL(acl []proto.ACL) string {
	if acl == nil {
		return "refuses security.auth"
	}
	var out []string
	for _, e := range acl {
		out = append(out, fmt.Sprintf("%s:%s %s", e.Scheme, e.ID.ID, perms(e.Perms)))
	}
	return strings.Join(out, ", ")
}

// perms renders ZooKeeper permission bits as ALL or their letters, in bit
// order (r read, w write, c create, d delete, a admin).
func perms(p int32) string {
	if p&proto.PermAll == proto.PermAll {
		return "ALL"
	}
	var b strings.Builder
	for i, c := range "rwcda" {
		if p&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	return b.String()
}
