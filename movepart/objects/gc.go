package objects

import (
	"context"
	"errors"
	"time"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// GC steps, for fault injection (Catalog.Point).
const (
	StepS3Deleted     = "s3-deleted"     // a deletable object is gone from S3, its znode not yet marked gone
	StepMarkedGone    = "marked-gone"    // and its znode is a tombstone
	StepOrphanBuried  = "orphan-buried"  // an orphan's key is a tombstone, its bytes not yet deleted
	StepOrphanDeleted = "orphan-deleted" // an orphan is gone from S3
)

// Collected says what a GC did or would do.
type Collected struct {
	Deleted   []string `json:"deleted"`   // deletable objects
	Orphans   []string `json:"orphans"`   // objects no shard knows, past the grace period
	Leftovers []string `json:"leftovers"` // bytes under collected keys (a GC stopped, or an upload again)
}

// GC deletes every deletable object (from S3, then its znode becomes a
// tombstone) and every orphan past the grace period (a tombstone first,
// then from S3); without commit it only lists them. A key's tombstone
// stays, so no registration of the key can succeed once GC may delete its
// bytes, whatever GC's or the registrar's clock says and however long
// either pauses. Idempotent, and safe beside Link and Register.
func (c *Catalog) GC(ctx context.Context, commit bool) (*Collected, error) {
	out := &Collected{}
	known := map[string]State{}
	for _, sh := range c.cluster.Shards {
		err := c.eachObject(ctx, sh.Name, func(key string, o Object, stat proto.Stat) error {
			known[key] = o.State
			if o.State != Deletable || o.Refs != 0 {
				return nil
			}
			out.Deleted = append(out.Deleted, key)
			if !commit {
				return nil
			}
			return c.collect(ctx, sh.Name, o, stat)
		})
		if err != nil {
			return out, err
		}
	}
	inFlight, err := c.Exports(ctx)
	if err != nil {
		return out, err
	}
	exports := c.exporting(inFlight)
	cutoff := time.Now().Add(-c.cluster.S3.Grace())
	for info, err := range c.bucket.List(ctx, c.cluster.S3.Prefix) {
		if err != nil {
			return out, err
		}
		state, isKnown := known[info.Key]
		switch {
		case state == Gone:
			out.Leftovers = append(out.Leftovers, info.Key)
			if commit {
				err = c.remove(ctx, info.Key, info.ETag)
			}
		case isKnown || info.Modified.After(cutoff) || inExport(exports, info.Key):
		case !commit:
			out.Orphans = append(out.Orphans, info.Key)
		default:
			var buried bool
			if buried, err = c.bury(ctx, info); buried {
				out.Orphans = append(out.Orphans, info.Key)
			}
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// collect deletes a deletable object: from S3 first, then its znode
// becomes a tombstone if it is still the one read. A GC that read it
// before and deletes its bytes late deletes bytes no one can register.
func (c *Catalog) collect(ctx context.Context, home string, o Object, stat proto.Stat) error {
	if err := c.remove(ctx, o.Key, o.ETag); err != nil {
		return err
	}
	c.point(StepS3Deleted)
	o.State = Gone
	err := c.commit(ctx, map[string][]client.Op{home: {client.SetOp(objectPath(o.Key), encode(o), stat.Version)}}, nil)
	if err != nil && !errors.Is(err, ErrConflict) { // conflict: another GC marked it
		return err
	}
	c.point(StepMarkedGone)
	return nil
}

// bury makes an orphan's key a tombstone on its home shard, then deletes
// its bytes. It reports false, deleting nothing, if the key's znode is
// there already: registered since the shards were read, or buried by
// another GC.
func (c *Catalog) bury(ctx context.Context, info ObjectInfo) (bool, error) {
	home := c.homeOf(info.Key)
	if err := c.ensure(ctx, home, objectDirs(info.Key)...); err != nil {
		return false, err
	}
	tomb := Object{Key: info.Key, State: Gone, ETag: info.ETag}
	err := c.commit(ctx, map[string][]client.Op{home: {c.store.CreateOp(objectPath(info.Key), encode(tomb), 0)}}, ErrExists)
	if errors.Is(err, ErrExists) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.point(StepOrphanBuried)
	if err := c.remove(ctx, info.Key, info.ETag); err != nil {
		return true, err
	}
	c.point(StepOrphanDeleted)
	return true, nil
}

// remove deletes key's bytes of etag (any, if empty): other bytes under
// the key, uploaded since, stay for the next GC to list.
func (c *Catalog) remove(ctx context.Context, key, etag string) error {
	if err := c.bucket.Remove(ctx, key, etag); err != nil && !errors.Is(err, ErrChanged) {
		return err
	}
	return nil
}

func (c *Catalog) point(step string) {
	if c.Point != nil {
		c.Point(step)
	}
}
