package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/xshard"
)

// Znode directories of the catalog on every shard.
const (
	Dir        = movepart.Root + "/s3"
	RefsDir    = Dir + "/refs"    // table / part / file
	ObjectsDir = Dir + "/objects" // fan-out / key, for the objects homed on the shard
)

// State is an object's state in the catalog.
type State string

const (
	// Live objects may gain references.
	Live State = "live"
	// Deletable objects have no reference left and wait for GC.
	Deletable State = "deletable"
	// Gone objects were collected: a tombstone, never deleted, so that the
	// key is never registered again (bytes under it may be deleted at any
	// time, by a GC that was paused).
	Gone State = "gone"
)

// Object is the content of an object znode.
type Object struct {
	Key   string `json:"key"`
	Refs  int64  `json:"refs"`
	State State  `json:"state"`
	ETag  string `json:"etag,omitempty"` // of the bytes registered or collected
}

// Ref names one part file of one table.
type Ref struct {
	Table movepart.TableRef `json:"table"`
	Part  string            `json:"part"`
	File  string            `json:"file"`
}

// String returns "SERVER:DB.TABLE/PART/FILE".
func (r Ref) String() string { return r.Table.String() + "/" + r.Part + "/" + r.File }

// Reference is the content of a reference znode: the object it refers to.
type Reference struct {
	Key  string `json:"key"`
	Home string `json:"home"` // the object's home shard
}

// Errors of the catalog; errors.Is finds them.
var (
	ErrUnknownObject = errors.New("objects: unknown object")
	ErrNoReference   = errors.New("objects: no such reference")
	ErrExists        = errors.New("objects: already registered or linked")
	ErrDeletable     = errors.New("objects: object has no reference left and is being deleted")
	ErrTooOld        = errors.New("objects: upload older than the orphan grace period")
	ErrConflict      = errors.New("objects: changed underneath, try again")
	ErrChanged       = errors.New("objects: the object's bytes changed (another ETag)")
)

// Catalog is the object catalog over a cluster's shards and bucket.
type Catalog struct {
	cluster *config.Cluster
	r       *xshard.Router
	store   *movepart.Store // reads that wait out transaction locks
	bucket  Bucket
	log     *slog.Logger
	// Point, when set, is called at each step boundary of GC.
	Point func(step string)
	// ensured remembers the directories known to exist, by shard and path:
	// a create, even one refused because the node exists, is a log entry.
	ensured sync.Map
}

// New returns a catalog over the router's shards and bucket. Its znodes
// get movepart.ACL(r.Cluster()): with security.auth set, the router must
// authenticate as it (movepart.AuthOptions), or every access fails at once
// with movepart.ErrNoAuth.
func New(r *xshard.Router, bucket Bucket, log *slog.Logger) *Catalog {
	if log == nil {
		log = slog.Default()
	}
	return &Catalog{cluster: r.Cluster(), r: r, store: movepart.NewStore(r, log), bucket: bucket, log: log}
}

func esc(s string) string { return strings.ReplaceAll(url.PathEscape(s), ".", "%2E") }

func tableDir(t movepart.TableRef) string {
	return RefsDir + "/" + esc(t.Server) + ":" + esc(t.Database) + "." + esc(t.Table)
}

// unescapeTable reads a table directory's name back.
func unescapeTable(name string) (movepart.TableRef, bool) {
	server, rest, ok := strings.Cut(name, ":")
	db, table, ok2 := strings.Cut(rest, ".")
	var err [3]error
	var t movepart.TableRef
	t.Server, err[0] = url.PathUnescape(server)
	t.Database, err[1] = url.PathUnescape(db)
	t.Table, err[2] = url.PathUnescape(table)
	return t, ok && ok2 && err[0] == nil && err[1] == nil && err[2] == nil
}

func partDir(t movepart.TableRef, part string) string { return tableDir(t) + "/" + esc(part) }

func refPath(r Ref) string { return partDir(r.Table, r.Part) + "/" + esc(r.File) }

// refDirs lists the directories ref's znode needs, parents first. A part
// has a directory of its own because a transaction that creates or
// deletes a znode locks its parent: references of different parts then
// never wait for each other.
func refDirs(r Ref) []string {
	return []string{movepart.Root, Dir, RefsDir, ObjectsDir, tableDir(r.Table), partDir(r.Table, r.Part)}
}

// objectDir spreads objects over 256 directories for the same reason.
func objectDir(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return fmt.Sprintf("%s/%02x", ObjectsDir, h.Sum32()&0xff)
}

func objectPath(key string) string { return objectDir(key) + "/" + url.PathEscape(key) }

// objectDirs lists the directories key's object znode needs on its home.
func objectDirs(key string) []string { return []string{movepart.Root, Dir, ObjectsDir, objectDir(key)} }

// homeOf returns key's home shard: the shard whose name hashed with key
// is highest (adding a shard moves only the keys that go to it). Every
// registration and every GC of a key meet at its one object znode there.
func (c *Catalog) homeOf(key string) string {
	var home string
	var best uint64
	for _, sh := range c.cluster.Shards {
		h := fnv.New64a()
		h.Write([]byte(sh.Name + "\x00" + key))
		if v := h.Sum64(); home == "" || v > best {
			home, best = sh.Name, v
		}
	}
	return home
}

// shardOf returns the shard that holds table's references.
func (c *Catalog) shardOf(t movepart.TableRef) (string, error) {
	sh, err := c.cluster.TableShard(t.Server, t.Database, t.Table)
	if err != nil {
		return "", fmt.Errorf("objects: %s: %w", t, err)
	}
	return sh.Name, nil
}

// read reads a znode, waiting out cross-shard transaction locks.
func (c *Catalog) read(ctx context.Context, shard, path string) ([]byte, proto.Stat, bool, error) {
	return c.store.Get(ctx, shard, path)
}

// children lists a directory on shard, waiting out locks; none if missing.
func (c *Catalog) children(ctx context.Context, shard, dir string) ([]string, error) {
	return c.store.Children(ctx, shard, dir)
}

// ensure creates dirs on shard if missing. Directories are never deleted,
// so each is created (or found) once per catalog.
func (c *Catalog) ensure(ctx context.Context, shard string, dirs ...string) error {
	for _, dir := range dirs {
		if _, ok := c.ensured.Load(shard + ":" + dir); ok {
			continue
		}
		known, err := c.store.EnsureDir(ctx, shard, dir)
		if err != nil {
			return err
		}
		if known { // else a transaction is creating it: not known to exist yet
			c.ensured.Store(shard+":"+dir, true)
		}
	}
	return nil
}

// object reads key's object znode on its home shard.
func (c *Catalog) object(ctx context.Context, home, key string) (Object, proto.Stat, bool, error) {
	data, stat, found, err := c.read(ctx, home, objectPath(key))
	if err != nil || !found {
		return Object{}, stat, found, err
	}
	var o Object
	if err := json.Unmarshal(data, &o); err != nil {
		return Object{}, stat, false, fmt.Errorf("objects: bad object znode %s on shard %s: %w", objectPath(key), home, err)
	}
	return o, stat, true, nil
}

// eachObject calls fn with every object homed on shard; an error of fn
// stops it.
func (c *Catalog) eachObject(ctx context.Context, shard string, fn func(key string, o Object, stat proto.Stat) error) error {
	fanout, err := c.children(ctx, shard, ObjectsDir)
	if err != nil {
		return err
	}
	slices.Sort(fanout)
	for _, dir := range fanout {
		names, err := c.children(ctx, shard, ObjectsDir+"/"+dir)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, name := range names {
			key, err := url.PathUnescape(name)
			if err != nil {
				continue // not a name the catalog wrote
			}
			o, stat, found, err := c.object(ctx, shard, key)
			if err != nil {
				return err
			}
			if found {
				if err := fn(key, o, stat); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// eachRef calls fn with every reference of table (on shard) whose part
// matches, in part and file order, with its part directory's Stat read
// before the reference (see bumpPart); an error of fn stops it.
func (c *Catalog) eachRef(ctx context.Context, shard string, table movepart.TableRef, match func(part string) bool,
	fn func(ref Ref, rf Reference, data []byte, stat, dir proto.Stat) error) error {
	parts, err := c.children(ctx, shard, tableDir(table))
	if err != nil {
		return err
	}
	slices.Sort(parts)
	for _, p := range parts {
		part, err := url.PathUnescape(p)
		if err != nil || !match(part) {
			continue
		}
		_, dir, found, err := c.read(ctx, shard, partDir(table, part))
		if err != nil || !found {
			return err
		}
		files, err := c.children(ctx, shard, partDir(table, part))
		if err != nil {
			return err
		}
		slices.Sort(files)
		for _, f := range files {
			file, err := url.PathUnescape(f)
			if err != nil {
				continue
			}
			ref := Ref{Table: table, Part: part, File: file}
			data, stat, found, err := c.read(ctx, shard, refPath(ref))
			if err != nil {
				return err
			}
			var rf Reference
			if !found || json.Unmarshal(data, &rf) != nil {
				continue // gone meanwhile, or not the catalog's
			}
			if err := fn(ref, rf, data, stat, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// bumpPart is the op every transaction that creates or deletes references
// of a part adds: it sets the part directory's data, raising its version,
// conditional on version (-1: any). A znode created again restarts at
// version 0, so a delete conditional on a reference's version alone could
// hit a newer reference of the same name; one conditional on its part
// directory's version, read before the reference, cannot.
func bumpPart(table movepart.TableRef, part string, version int32) client.Op {
	return client.SetOp(partDir(table, part), nil, version)
}

// reference reads ref's znode on its table's shard.
func (c *Catalog) reference(ctx context.Context, ref Ref) (Reference, proto.Stat, string, error) {
	shard, err := c.shardOf(ref.Table)
	if err != nil {
		return Reference{}, proto.Stat{}, "", err
	}
	data, stat, found, err := c.read(ctx, shard, refPath(ref))
	if err != nil {
		return Reference{}, stat, shard, err
	}
	if !found {
		return Reference{}, stat, shard, fmt.Errorf("%w: %s", ErrNoReference, ref)
	}
	var rf Reference
	if err := json.Unmarshal(data, &rf); err != nil {
		return Reference{}, stat, shard, fmt.Errorf("objects: bad reference znode %s on shard %s: %w", refPath(ref), shard, err)
	}
	return rf, stat, shard, nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// commit runs ops by shard as one transaction and turns a refusal by a
// version or existence check into want (or ErrConflict), a lock held by
// another transaction into a retry.
func (c *Catalog) commit(ctx context.Context, ops map[string][]client.Op, exists error) error {
	var reqs []xshard.MultiRequestForShard
	for shard, o := range ops {
		reqs = append(reqs, xshard.MultiRequestForShard{Shard: shard, Requests: o})
	}
	backoff := 10 * time.Millisecond
	for {
		_, err := xshard.CrossShardTransaction(ctx, c.r, reqs)
		var xe *xshard.Error
		switch {
		case err == nil:
			return nil
		case errors.Is(err, proto.ErrNoAuth):
			return c.store.Explain(err) // refused again if retried
		case errors.As(err, &xe) && xe.Code == proto.ErrNodeExists && exists != nil:
			return exists
		case errors.As(err, &xe) && (xe.Code == proto.ErrBadVersion || xe.Code == proto.ErrNoNode || xe.Code == proto.ErrNodeExists):
			return fmt.Errorf("%w: %v", ErrConflict, err)
		case errors.As(err, &xe) && (xe.Code == proto.ErrLocked || xe.Code == proto.ErrOperationTimeout):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("objects: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
