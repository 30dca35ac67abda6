package objects

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
)

// Register records that ref refers to key, an object uploaded to the bucket
// moments ago, with a reference count of 1; the object's home is ref's
// table's shard. Registering the same ref to the same key again succeeds
// (a retry); to another key it fails with ErrExists.
func (c *Catalog) Register(ctx context.Context, ref Ref, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	shard, err := c.shardOf(ref.Table)
	if err != nil {
		return err
	}
	info, err := c.bucket.Stat(ctx, key)
	if err != nil {
		return fmt.Errorf("objects: register %s: %w", ref, err)
	}
	if age := time.Since(info.Modified); age > c.cluster.S3.Grace() {
		return fmt.Errorf("%w: %s was uploaded %v ago; upload it again", ErrTooOld, key, age.Round(time.Second))
	}
	if err := c.ensure(ctx, shard, movepart.Root, Dir, RefsDir, ObjectsDir, tableDir(ref.Table)); err != nil {
		return err
	}
	ops := map[string][]client.Op{shard: {
		client.CreateOp(refPath(ref), encode(Reference{Key: key, Home: shard}), 0, nil),
		client.CreateOp(objectPath(key), encode(Object{Key: key, Refs: 1, State: Live}), 0, nil),
	}}
	err = c.commit(ctx, ops, ErrExists)
	if errors.Is(err, ErrExists) && c.refersTo(ctx, ref, key) {
		return nil
	}
	return err
}

// refersTo reports whether ref exists and refers to key.
func (c *Catalog) refersTo(ctx context.Context, ref Ref, key string) bool {
	rf, _, _, err := c.reference(ctx, ref)
	return err == nil && rf.Key == key
}

// checkKey refuses keys outside the catalog's prefix.
func (c *Catalog) checkKey(key string) error {
	if key == "" || !strings.HasPrefix(key, c.cluster.S3.Prefix) {
		return fmt.Errorf("objects: key %q is outside the catalog's prefix %q", key, c.cluster.S3.Prefix)
	}
	return nil
}

// Link makes dst refer to the object src refers to, adding one to its
// count: a hard link, possibly into a table on another shard. Linking the
// same dst to the same object again succeeds (a retry).
func (c *Catalog) Link(ctx context.Context, src, dst Ref) error {
	rf, _, _, err := c.reference(ctx, src)
	if err != nil {
		return err
	}
	shard, err := c.shardOf(dst.Table)
	if err != nil {
		return err
	}
	if err := c.ensure(ctx, shard, movepart.Root, Dir, RefsDir, ObjectsDir, tableDir(dst.Table)); err != nil {
		return err
	}
	for {
		o, stat, found, err := c.object(ctx, rf.Home, rf.Key)
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("%w: %s (home shard %s)", ErrUnknownObject, rf.Key, rf.Home)
		case o.State != Live:
			return fmt.Errorf("%w: %s", ErrDeletable, rf.Key)
		}
		o.Refs++
		ops := map[string][]client.Op{}
		ops[shard] = append(ops[shard], client.CreateOp(refPath(dst), encode(rf), 0, nil))
		ops[rf.Home] = append(ops[rf.Home], client.SetOp(objectPath(rf.Key), encode(o), stat.Version))
		err = c.commit(ctx, ops, ErrExists)
		switch {
		case errors.Is(err, ErrExists) && c.refersTo(ctx, dst, rf.Key):
			return nil
		case errors.Is(err, ErrConflict):
			continue // the count moved: read it again
		}
		return err
	}
}

// Unlink removes ref, subtracting one from its object's count; the object
// whose count reaches zero becomes deletable in the same transaction.
func (c *Catalog) Unlink(ctx context.Context, ref Ref) error {
	for {
		rf, rstat, shard, err := c.reference(ctx, ref)
		if err != nil {
			return err
		}
		o, stat, found, err := c.object(ctx, rf.Home, rf.Key)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %s, referred to by %s (home shard %s)", ErrUnknownObject, rf.Key, ref, rf.Home)
		}
		o.Refs--
		if o.Refs <= 0 {
			o.Refs, o.State = 0, Deletable
		}
		ops := map[string][]client.Op{}
		ops[shard] = append(ops[shard], client.DeleteOp(refPath(ref), rstat.Version))
		ops[rf.Home] = append(ops[rf.Home], client.SetOp(objectPath(rf.Key), encode(o), stat.Version))
		if err := c.commit(ctx, ops, nil); !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

// Move moves every reference of part of table from to table to, in one
// transaction: a zero-copy move of the part (counts unchanged, no byte
// moved). An empty part moves every part of from. It returns how many
// references moved.
func (c *Catalog) Move(ctx context.Context, from, to movepart.TableRef, part string) (int, error) {
	if from == to {
		return 0, fmt.Errorf("objects: move %s to itself", from)
	}
	src, err := c.shardOf(from)
	if err != nil {
		return 0, err
	}
	dst, err := c.shardOf(to)
	if err != nil {
		return 0, err
	}
	if err := c.ensure(ctx, dst, movepart.Root, Dir, RefsDir, ObjectsDir, tableDir(to)); err != nil {
		return 0, err
	}
	for {
		names, err := c.children(ctx, src, tableDir(from))
		if err != nil {
			return 0, err
		}
		ops := map[string][]client.Op{}
		n := 0
		for _, name := range names {
			if part != "" && !strings.HasPrefix(name, esc(part)+"|") {
				continue
			}
			data, stat, found, err := c.read(ctx, src, tableDir(from)+"/"+name)
			if err != nil {
				return 0, err
			}
			if !found {
				continue
			}
			ops[src] = append(ops[src], client.DeleteOp(tableDir(from)+"/"+name, stat.Version))
			ops[dst] = append(ops[dst], client.CreateOp(tableDir(to)+"/"+name, data, 0, nil))
			n++
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: no part %q of %s in the catalog", ErrNoReference, part, from)
		}
		err = c.commit(ctx, ops, ErrExists)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return n, err
	}
}
