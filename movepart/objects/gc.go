package objects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// GC steps, for fault injection (Catalog.Point).
const (
	StepS3Deleted     = "s3-deleted"     // a deletable object is gone from S3, its znode not yet
	StepZnodeDeleted  = "znode-deleted"  // and its znode is gone too
	StepOrphanDeleted = "orphan-deleted" // an orphan is gone from S3
)

// Collected says what a GC did or would do.
type Collected struct {
	Deleted []string `json:"deleted"` // deletable objects
	Orphans []string `json:"orphans"` // objects no shard knows, past the grace period
}

// GC deletes every deletable object (from S3, then its znode) and every
// orphan past the grace period; without commit it only lists them.
// Idempotent, and safe beside Link: a deletable object is never linked
// again, and its znode goes only if unchanged since it was read.
func (c *Catalog) GC(ctx context.Context, commit bool) (*Collected, error) {
	out := &Collected{}
	known := map[string]bool{}
	for _, sh := range c.cluster.Shards {
		err := c.eachObject(ctx, sh.Name, func(key string, o Object, stat proto.Stat) error {
			known[key] = true
			if o.State != Deletable || o.Refs != 0 {
				return nil
			}
			out.Deleted = append(out.Deleted, key)
			if !commit {
				return nil
			}
			return c.collect(ctx, sh.Name, key, stat)
		})
		if err != nil {
			return out, err
		}
	}
	exports, err := c.exporting(ctx)
	if err != nil {
		return out, err
	}
	cutoff := time.Now().Add(-c.cluster.S3.Grace())
	for info, err := range c.bucket.List(ctx, c.cluster.S3.Prefix) {
		if err != nil {
			return out, err
		}
		if known[info.Key] || info.Modified.After(cutoff) || inExport(exports, info.Key) {
			continue
		}
		// Not known when the shards were read: read its home candidates
		// again, since it may have been registered meanwhile.
		if registered, err := c.registered(ctx, info.Key); err != nil || registered {
			if err != nil {
				return out, err
			}
			continue
		}
		out.Orphans = append(out.Orphans, info.Key)
		if commit {
			if err := c.bucket.Remove(ctx, info.Key); err != nil {
				return out, err
			}
			c.point(StepOrphanDeleted)
		}
	}
	return out, nil
}

// collect deletes a deletable object: from S3 first, then its znode if it
// is still the one read.
func (c *Catalog) collect(ctx context.Context, home, key string, stat proto.Stat) error {
	if err := c.bucket.Remove(ctx, key); err != nil {
		return err
	}
	c.point(StepS3Deleted)
	var resp proto.Empty
	err := c.r.Do(ctx, home, proto.OpDelete, &proto.PathVersionRequest{Path: objectPath(key), Version: stat.Version}, &resp)
	if err != nil && !isCode(err, proto.ErrNoNode) {
		return fmt.Errorf("objects: drop %s on shard %s: %w", objectPath(key), home, c.store.Explain(err))
	}
	c.point(StepZnodeDeleted)
	return nil
}

// registered reports whether any shard has key's object znode.
func (c *Catalog) registered(ctx context.Context, key string) (bool, error) {
	for _, sh := range c.cluster.Shards {
		_, _, found, err := c.read(ctx, sh.Name, objectPath(key))
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}

func (c *Catalog) point(step string) {
	if c.Point != nil {
		c.Point(step)
	}
}

func isCode(err error, code proto.Code) bool { return errors.Is(err, code) }
