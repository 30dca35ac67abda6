package objects

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
)

// Register records that ref refers to key, an object uploaded to the bucket
// moments ago, with a reference count of 1, on the key's home shard (one
// per key, whatever the table). Registering the same ref to the same key
// again succeeds (a retry); to another key, or a key registered for
// another ref, it fails with ErrExists; a key GC has collected (or is
// collecting) is refused with ErrDeletable, in the same transaction: the
// bytes must be uploaded again under a new key.
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
	// Advice only, by this host's clock: GC's tombstone is what refuses.
	if age := time.Since(info.Modified); age > c.cluster.S3.Grace() {
		return fmt.Errorf("%w: %s was uploaded %v ago; upload it again (under a new key if GC took it)", ErrTooOld, key, age.Round(time.Second))
	}
	home := c.homeOf(key)
	if err := c.ensure(ctx, shard, refDirs(ref)...); err != nil {
		return err
	}
	if err := c.ensure(ctx, home, objectDirs(key)...); err != nil {
		return err
	}
	ops := map[string][]client.Op{}
	ops[shard] = append(ops[shard], c.store.CreateOp(refPath(ref), encode(Reference{Key: key, Home: home}), 0),
		bumpPart(ref.Table, ref.Part, -1))
	ops[home] = append(ops[home], c.store.CreateOp(objectPath(key), encode(Object{Key: key, Refs: 1, State: Live, ETag: info.ETag}), 0))
	err = c.commit(ctx, ops, ErrExists)
	if errors.Is(err, ErrExists) {
		return c.taken(ctx, ref, key, home)
	}
	return err
}

// taken explains a registration refused because ref or key's object
// exists: nil if ref refers to key (a retry whose answer was lost).
func (c *Catalog) taken(ctx context.Context, ref Ref, key, home string) error {
	if c.refersTo(ctx, ref, key) {
		return nil
	}
	o, _, found, err := c.object(ctx, home, key)
	switch {
	case err != nil:
		return err
	case found && o.State != Live:
		return fmt.Errorf("%w: %s is %s (GC took it); upload it again under a new key", ErrDeletable, key, o.State)
	case found:
		return fmt.Errorf("%w: %s is registered (home shard %s); link to it instead", ErrExists, key, home)
	}
	return fmt.Errorf("%w: %s refers to another object", ErrExists, ref)
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
	backoff := 5 * time.Millisecond
	for {
		if err := c.ensure(ctx, shard, refDirs(dst)...); err != nil {
			return err
		}
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
		ops[shard] = append(ops[shard], c.store.CreateOp(refPath(dst), encode(rf), 0), bumpPart(dst.Table, dst.Part, -1))
		ops[rf.Home] = append(ops[rf.Home], client.SetOp(objectPath(rf.Key), encode(o), stat.Version))
		err = c.commit(ctx, ops, ErrExists)
		switch {
		case errors.Is(err, ErrExists) && c.refersTo(ctx, dst, rf.Key):
			return nil
		case errors.Is(err, ErrConflict):
			if err := pause(ctx, &backoff); err != nil {
				return err
			}
			continue // the count moved: read it again
		}
		return err
	}
}

// pause waits before a retry, doubling the wait up to half a second.
func pause(ctx context.Context, backoff *time.Duration) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("objects: %w", ctx.Err())
	case <-time.After(*backoff):
	}
	*backoff = min(2**backoff, 500*time.Millisecond)
	return nil
}

// Unlink removes ref, subtracting one from its object's count; the object
// whose count reaches zero becomes deletable in the same transaction.
func (c *Catalog) Unlink(ctx context.Context, ref Ref) error {
	backoff := 5 * time.Millisecond
	for {
		shard, err := c.shardOf(ref.Table)
		if err != nil {
			return err
		}
		_, dir, found, err := c.read(ctx, shard, partDir(ref.Table, ref.Part))
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: %s", ErrNoReference, ref)
		}
		rf, rstat, _, err := c.reference(ctx, ref)
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
		ops[shard] = append(ops[shard], client.DeleteOp(refPath(ref), rstat.Version), bumpPart(ref.Table, ref.Part, dir.Version))
		ops[rf.Home] = append(ops[rf.Home], client.SetOp(objectPath(rf.Key), encode(o), stat.Version))
		if err := c.commit(ctx, ops, nil); !errors.Is(err, ErrConflict) {
			return err
		}
		if err := pause(ctx, &backoff); err != nil {
			return err
		}
	}
}

// Move moves every reference of part of table from to table to, in one
// transaction: a zero-copy move of the part (counts unchanged, no byte
// moved). An empty part moves every part of from. It returns how many
// references moved.
func (c *Catalog) Move(ctx context.Context, from, to movepart.TableRef, part string) (int, error) {
	return c.move(ctx, from, to, "part "+part, func(p string) bool { return part == "" || p == part })
}

// MovePartition moves the references of every part of partition (by id)
// of table from to table to, in one transaction: a zero-copy partition
// move. MergeTree part names start with the partition id and "_".
func (c *Catalog) MovePartition(ctx context.Context, from, to movepart.TableRef, partition string) (int, error) {
	return c.move(ctx, from, to, "partition "+partition, func(p string) bool { return strings.HasPrefix(p, partition+"_") })
}

// move moves the references of the parts of from that match.
func (c *Catalog) move(ctx context.Context, from, to movepart.TableRef, what string, match func(part string) bool) (int, error) {
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
	backoff := 5 * time.Millisecond
	for {
		ops := map[string][]client.Op{}
		dirs := map[string]bool{} // the destination's part directories: true if there already
		n := 0
		bumped := map[string]bool{} // source part directories
		err := c.eachRef(ctx, src, from, match, func(ref Ref, _ Reference, data []byte, stat, srcDir proto.Stat) error {
			moved := Ref{Table: to, Part: ref.Part, File: ref.File}
			if !bumped[ref.Part] {
				bumped[ref.Part] = true
				ops[src] = append(ops[src], bumpPart(from, ref.Part, srcDir.Version))
			}
			dir := partDir(to, ref.Part)
			there, seen := dirs[dir]
			if !seen {
				// A missing part directory is created in the transaction
				// itself: one entry for the whole move.
				_, _, found, err := c.read(ctx, dst, dir)
				if err != nil {
					return err
				}
				there = found
				dirs[dir] = there
				if there {
					ops[dst] = append(ops[dst], bumpPart(to, ref.Part, -1))
				} else {
					ops[dst] = append(ops[dst], c.store.CreateOp(dir, nil, 0))
				}
			}
			if there {
				if _, _, found, err := c.read(ctx, dst, refPath(moved)); err != nil || found {
					if found {
						err = fmt.Errorf("%w: %s", ErrExists, moved)
					}
					return err
				}
			}
			ops[src] = append(ops[src], client.DeleteOp(refPath(ref), stat.Version))
			ops[dst] = append(ops[dst], c.store.CreateOp(refPath(moved), data, 0))
			n++
			return nil
		})
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: no %s of %s in the catalog", ErrNoReference, what, from)
		}
		// A directory or reference that appeared meanwhile is a conflict:
		// read again.
		err = c.commit(ctx, ops, nil)
		if errors.Is(err, ErrConflict) {
			if err := pause(ctx, &backoff); err != nil {
				return 0, err
			}
			continue
		}
		return n, err
	}
}

// Entry is one reference of a table, as Refs lists it.
type Entry struct {
	Part string `json:"part"`
	File string `json:"file"`
	Reference
}

// Refs lists the references of table, by part and file.
func (c *Catalog) Refs(ctx context.Context, table movepart.TableRef) ([]Entry, error) {
	shard, err := c.shardOf(table)
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = c.eachRef(ctx, shard, table, func(string) bool { return true }, func(ref Ref, rf Reference, _ []byte, _, _ proto.Stat) error {
		out = append(out, Entry{Part: ref.Part, File: ref.File, Reference: rf})
		return nil
	})
	return out, err
}

// Homed is an object with its home shard, as Objects lists it.
type Homed struct {
	Object
	Home string `json:"home"`
}

// Objects lists every object of every shard.
func (c *Catalog) Objects(ctx context.Context) ([]Homed, error) {
	var out []Homed
	for _, sh := range c.cluster.Shards {
		err := c.eachObject(ctx, sh.Name, func(_ string, o Object, _ proto.Stat) error {
			out = append(out, Homed{Object: o, Home: sh.Name})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
