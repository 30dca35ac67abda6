package clickhouse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// syncPoll is how often SyncReplica reads the replicas' state in ZooKeeper.
const syncPoll = 50 * time.Millisecond

// SyncReplica waits until every replica of db.table, a Replicated*MergeTree
// table, has caught up with the replication log as it stood when the call
// began: each replica has pulled every entry up to that point into its
// queue and has executed every queue entry it held then (so it has every
// part those entries fetch, replace or drop). It first runs SYSTEM SYNC
// REPLICA on this server's replica, under query id QueryID(qid,
// OpSyncReplica), then follows the other replicas through system.zookeeper.
// A replica that is down does not catch up: the wait then ends with ctx,
// and the error names the replicas still behind. For a table that is not
// replicated there is nothing to wait for and SyncReplica returns nil.
func (c *Conn) SyncReplica(ctx context.Context, qid, db, table string) error {
	const op = "sync replicas of"
	name := tableName(db, table)
	if err := c.checkQID(op, name, "", qid); err != nil {
		return err
	}
	t, err := c.Table(ctx, db, table)
	if err != nil {
		return err
	}
	if !t.Replicated {
		return nil
	}
	zk := strings.TrimSuffix(t.ZooKeeperPath, "/")
	head, err := c.logHead(ctx, zk)
	if err != nil {
		return c.fail(op, name, "", "", err)
	}
	id := QueryID(qid, OpSyncReplica)
	if err := c.exec(ctx, id, "SYSTEM SYNC REPLICA "+qualified(db, table)); err != nil {
		return c.fail(op, name, "", id, err)
	}
	replicas, err := c.zkChildren(ctx, zk+"/replicas")
	if err != nil {
		return c.fail(op, name, "", "", err)
	}
	// waiting[r] is nil until replica r has pulled the log up to head;
	// then it holds the queue entries r had at that moment, removed as
	// r executes them.
	waiting := make(map[string]map[string]bool, len(replicas))
	for _, r := range replicas {
		waiting[r] = nil
	}
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for {
		for _, r := range replicas {
			if _, ok := waiting[r]; !ok {
				continue
			}
			done, err := c.replicaCaughtUp(ctx, zk+"/replicas/"+r, head, waiting, r)
			if err != nil && ctx.Err() != nil {
				break // report the replicas behind, below
			}
			if err != nil {
				return c.fail(op, name, "", "", fmt.Errorf("replica %s: %w", r, err))
			}
			if done {
				delete(waiting, r)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return c.fail(op, name, "", id, fmt.Errorf("%w; replicas not caught up: %s", ctx.Err(), c.describeLagging(waiting, zk)))
		case <-tick.C:
		}
	}
}

// replicaCaughtUp advances replica r's wait by one look at ZooKeeper.
func (c *Conn) replicaCaughtUp(ctx context.Context, path string, head int64, waiting map[string]map[string]bool, r string) (bool, error) {
	if waiting[r] == nil {
		ptr, err := c.zkValue(ctx, path, "log_pointer")
		if err != nil {
			return false, err
		}
		p, err := strconv.ParseInt(ptr, 10, 64)
		if err != nil && ptr != "" {
			return false, fmt.Errorf("log_pointer %q: %v", ptr, err)
		}
		if ptr == "" || p <= head {
			return false, nil
		}
		queue, err := c.zkChildren(ctx, path+"/queue")
		if err != nil {
			return false, err
		}
		waiting[r] = make(map[string]bool, len(queue))
		for _, q := range queue {
			waiting[r][q] = true
		}
		if len(queue) == 0 {
			return true, nil
		}
	}
	queue, err := c.zkChildren(ctx, path+"/queue")
	if err != nil {
		return false, err
	}
	now := make(map[string]bool, len(queue))
	for _, q := range queue {
		now[q] = true
	}
	for q := range waiting[r] {
		if !now[q] {
			delete(waiting[r], q)
		}
	}
	return len(waiting[r]) == 0, nil
}

func (c *Conn) describeLagging(waiting map[string]map[string]bool, zk string) string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(waiting)) {
		s := r
		if waiting[r] == nil {
			s += " (has not pulled the log)"
		} else {
			s += fmt.Sprintf(" (%d queue entries left)", len(waiting[r]))
		}
		// A short look: ctx has already ended.
		actx, cancel := context.WithTimeout(context.Background(), time.Second)
		if active, err := c.zkChildren(actx, zk+"/replicas/"+r); err == nil && !slices.Contains(active, "is_active") {
			s += " inactive"
		}
		cancel()
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// logHead returns the index of the newest entry of the replication log at
// zk, or -1 when the log is empty.
func (c *Conn) logHead(ctx context.Context, zk string) (int64, error) {
	entries, err := c.zkChildren(ctx, zk+"/log")
	if err != nil {
		return 0, err
	}
	head := int64(-1)
	for _, e := range entries {
		n, err := strconv.ParseInt(strings.TrimPrefix(e, "log-"), 10, 64)
		if err == nil && n > head {
			head = n
		}
	}
	return head, nil
}

// zkChildren lists the children of a ZooKeeper node through system.zookeeper.
func (c *Conn) zkChildren(ctx context.Context, path string) ([]string, error) {
	var out []string
	err := c.selectRows(ctx, "SELECT name FROM system.zookeeper WHERE path = "+quote(path), func(r driver.Rows) error {
		var n string
		if err := r.Scan(&n); err != nil {
			return err
		}
		out = append(out, n)
		return nil
	})
	return out, err
}

// zkValue reads the value of child name of a ZooKeeper node, "" if absent.
func (c *Conn) zkValue(ctx context.Context, path, name string) (string, error) {
	var v string
	err := c.db.QueryRow(ctx, "SELECT value FROM system.zookeeper WHERE path = "+quote(path)+" AND name = "+quote(name)).Scan(&v)
	if isNoRows(err) {
		return "", nil
	}
	return v, err
}
