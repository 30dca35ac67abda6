package movepart

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/clickhouse"
)

// A replicated table's partition is what its replica set holds: every part
// committed through any replica, which the table's keeper path records,
// fetched by the server the mover asks or not. A move reads such a table
// through a replica that holds all of it, and its part fence keeps the
// set as it is from the intent on (see Endpoint.ZooKeeperPath).

// settled returns the server a move reads replicated table t through: t's
// own, or another of the table's replicas that the cluster file names,
// whose active parts of the partition are exactly what the replica set
// holds. It waits up to Options.Settle for one, then refuses the move
// with what each candidate lacks.
func (m *Mover) settled(ctx context.Context, t TableRef, tab *clickhouse.Table, partition string) (string, error) {
	deadline := time.Now().Add(m.opt.Settle)
	for {
		server, err := m.completeReplica(ctx, t, tab, partition)
		var unsettled *unsettledError
		switch {
		case err == nil:
			return server, nil
		case !errors.As(err, &unsettled):
			return "", refuse("%w", err)
		case time.Now().After(deadline):
			return "", refuse("%w; waited %s for it to settle (a replica that lags catches up once its fetches run; name a replica that holds every part in the cluster file to read through it)", err, m.opt.Settle)
		}
		select {
		case <-ctx.Done():
			return "", refuse("%w (%v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unsettledError says no replica the mover can reach holds every part of
// a replicated table's partition.
type unsettledError struct {
	table, partition string
	want             []string            // the replica set's parts
	lacks            map[string][]string // by server asked: the parts it lacks
	unnamed          []string            // replicas the cluster file names no server for
}

func (e *unsettledError) Error() string {
	var lacks []string
	for _, s := range slices.Sorted(maps.Keys(e.lacks)) {
		lacks = append(lacks, fmt.Sprintf("%s lacks %v", s, e.lacks[s]))
	}
	msg := fmt.Sprintf("partition %s of %s is not settled: its replicas hold parts %v; %s", e.partition, e.table, e.want, strings.Join(lacks, "; "))
	if len(e.unnamed) > 0 {
		msg += fmt.Sprintf("; replicas the cluster file names no server for: %v", e.unnamed)
	}
	return msg
}

// completeReplica returns a server holding every part of the partition
// that t's replica set holds (an unsettledError if none does).
func (m *Mover) completeReplica(ctx context.Context, t TableRef, tab *clickhouse.Table, partition string) (string, error) {
	want, replicas, err := m.replicaSetParts(ctx, t, tab, partition)
	if err != nil {
		return "", err
	}
	servers, unnamed := m.replicaServers(t.Server, replicas)
	e := &unsettledError{table: t.String(), partition: partition, want: want, lacks: map[string][]string{}, unnamed: unnamed}
	for _, server := range servers {
		ref := TableRef{Server: server, Database: t.Database, Table: t.Table}
		if server != t.Server && !m.sameTable(ctx, ref, tab) {
			continue
		}
		parts, err := m.parts(ctx, ref, partition)
		if err != nil {
			return "", err
		}
		have := partNames(parts)
		if slices.Equal(have, want) {
			return server, nil
		}
		e.lacks[server] = slices.DeleteFunc(slices.Clone(want), func(p string) bool { return slices.Contains(have, p) })
	}
	return "", e
}

// replicaSetParts returns the parts of the partition t's replica set holds,
// outermost (not covered by a merge), as t's keeper path records them, and
// the replicas.
func (m *Mover) replicaSetParts(ctx context.Context, t TableRef, tab *clickhouse.Table, partition string) ([]string, []clickhouse.Replica, error) {
	var want []string
	var replicas []clickhouse.Replica
	err := m.onServer(ctx, t.Server, "list the replicas of "+t.String(), func(c *clickhouse.Conn) error {
		var err error
		if replicas, err = c.Replicas(ctx, tab); err != nil {
			return err
		}
		held, err := c.KeeperParts(ctx, tab, replicas, partition)
		want = clickhouse.Outermost(slices.Concat(slices.Collect(maps.Values(held))...), tab.LegacySyntax)
		return err
	})
	return want, replicas, err
}

// Replicas returns e's table as each server of the cluster file that holds
// a replica of it names it, e's own server first: e alone for a table that
// is not replicated, or when e's server does not answer.
func (m *Mover) Replicas(ctx context.Context, e Endpoint) []TableRef {
	out := []TableRef{e.TableRef}
	if e.ZooKeeperPath == "" {
		return out
	}
	c, err := m.Conn(ctx, e.Server)
	if err != nil {
		return out
	}
	tab, err := c.Table(ctx, e.Database, e.Table)
	if err != nil || !tab.Replicated {
		return out
	}
	replicas, err := c.Replicas(ctx, tab)
	if err != nil {
		return out
	}
	servers, _ := m.replicaServers(e.Server, replicas)
	for _, s := range servers[1:] {
		ref := TableRef{Server: s, Database: e.Database, Table: e.Table}
		if m.sameTable(ctx, ref, tab) {
			out = append(out, ref)
		}
	}
	return out
}

// sameTable reports whether ref is a replica of tab (the same keeper path).
func (m *Mover) sameTable(ctx context.Context, ref TableRef, tab *clickhouse.Table) bool {
	c, err := m.Conn(ctx, ref.Server)
	if err != nil {
		return false
	}
	other, err := c.Table(ctx, ref.Database, ref.Table)
	return err == nil && other.Replicated && other.ZooKeeperPath == tab.ZooKeeperPath
}

// replicaServers returns the servers of the cluster file that are replicas
// among replicas, named first, and the replicas no server is found for.
func (m *Mover) replicaServers(named string, replicas []clickhouse.Replica) (servers, unnamed []string) {
	servers = []string{named}
	for _, r := range replicas {
		found := false
		for _, s := range m.cluster.ClickHouse.Servers {
			if sameAddr(s.Address, r.Addr()) {
				found = true
				if !slices.Contains(servers, s.Name) {
					servers = append(servers, s.Name)
				}
			}
		}
		if !found {
			unnamed = append(unnamed, r.Name+" ("+r.Addr()+")")
		}
	}
	return servers, unnamed
}

// sameAddr reports whether two host:port addresses name one server:
// equal, or with the same port on hosts that are both loopback names.
func sameAddr(a, b string) bool {
	if a == b {
		return true
	}
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && pa == pb && loopback(ha) && loopback(hb)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// holdsAll is holds for a move's checks before its commit point: e's
// server holds want in the partition and, for a replicated table, holds
// exactly the parts its replica set holds (nothing was added through
// another replica that e's server has not seen).
func (m *Mover) holdsAll(ctx context.Context, e Endpoint, partition string, want clickhouse.Fingerprint) (bool, error) {
	same, err := m.holds(ctx, e, partition, want)
	if err != nil || !same || e.ZooKeeperPath == "" {
		return same, err
	}
	var tab *clickhouse.Table
	err = m.onServer(ctx, e.Server, "read "+e.TableRef.String(), func(c *clickhouse.Conn) error {
		tab, err = c.Table(ctx, e.Database, e.Table)
		return err
	})
	if err != nil {
		return false, err
	}
	outer, _, err := m.replicaSetParts(ctx, e.TableRef, tab, partition)
	if err != nil {
		return false, err
	}
	local, err := m.parts(ctx, e.TableRef, partition)
	return slices.Equal(outer, partNames(local)), err
}
