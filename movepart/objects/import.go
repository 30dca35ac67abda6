package objects

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
)

// Steps of a part in an import record.
const (
	stepFetch     = ""          // to download
	stepFetched   = "fetched"   // whole in detached/, ATTACH PART not sent
	stepAttaching = "attaching" // ATTACH PART sent
	stepAttached  = "attached"
)

// importRecord is an import of a table partition: each part's state. It
// stays once every part is attached, so that no part is attached twice.
type importRecord struct {
	ID        string                 `json:"id"`
	Table     movepart.TableRef      `json:"table"`
	Partition string                 `json:"partition"`
	Parts     map[string]*importPart `json:"parts"` // by the part's name in the catalog
}

// importPart is one part of an import.
type importPart struct {
	Step string `json:"step"`
	// Local names the part's directory in detached/: the part's name with
	// random block numbers, this import's alone, never an operator's.
	Local string `json:"local"`
	// Key is its first file's object: a part of the same name that
	// arrives with other objects once this one is attached is another.
	Key string `json:"key"`
}

// importRun is one run of an import: the record and where it writes.
type importRun struct {
	c        *Catalog
	ch       *clickhouse.Conn
	shard    string
	path     string
	version  int32
	rec      importRecord
	files    map[string][]Entry // by part, as the catalog holds them now
	detached string
}

// Import materialises partition of table from the catalog into the table
// on server ch, whose files this process can write: each part's files
// are downloaded into the table's detached/ directory, under a name of
// the import's own (ClickHouse checks only the partition of the name on
// ATTACH PART, and gives the part new block numbers), and the part is
// attached (ATTACH PART). A record on the table's shard says which parts
// are fetched and attached, so a run after a crash attaches each part
// exactly once; a part whose download is gone or refused by the server
// before it was attached is fetched again. A later run attaches the
// parts whose references arrived since. It returns the parts imported,
// by the names they have in the catalog.
func (c *Catalog) Import(ctx context.Context, ch *clickhouse.Conn, table movepart.TableRef, partition string) ([]string, error) {
	shard, err := c.shardOf(table)
	if err != nil {
		return nil, err
	}
	r := &importRun{c: c, ch: ch, shard: shard, path: ImportsDir + "/" + transferName(table, partition), files: map[string][]Entry{}}
	err = c.eachRef(ctx, shard, table, func(p string) bool { return strings.HasPrefix(p, partition+"_") },
		func(ref Ref, rf Reference, _ []byte, _, _ proto.Stat) error {
			r.files[ref.Part] = append(r.files[ref.Part], Entry{Part: ref.Part, File: ref.File, Reference: rf})
			return nil
		})
	if err != nil {
		return nil, err
	}
	if err := c.ensure(ctx, shard, movepart.Root, Dir, ImportsDir); err != nil {
		return nil, err
	}
	r.version, err = c.record(ctx, shard, r.path, &r.rec, func() any {
		return importRecord{ID: uuid.NewString(), Table: table, Partition: partition, Parts: map[string]*importPart{}}
	})
	if err != nil {
		return nil, err
	}
	if err := r.plan(ctx); err != nil {
		return nil, err
	}
	if len(r.rec.Parts) == 0 {
		_ = c.r.Do(ctx, shard, proto.OpDelete, &proto.PathVersionRequest{Path: r.path, Version: r.version}, &proto.Empty{})
		return nil, fmt.Errorf("%w: no part of partition %s of %s in the catalog", ErrNoReference, partition, table)
	}
	dataPath, err := ch.DataPath(ctx, table.Database, table.Table)
	if err != nil {
		return nil, err
	}
	r.detached = filepath.Join(dataPath, "detached")
	parts := slices.Sorted(maps.Keys(r.rec.Parts))
	for _, part := range parts {
		if err := r.part(ctx, part); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// plan adds to the record the parts the catalog holds that it lacks, each
// with its own name in detached/, and saves it if it changed.
func (r *importRun) plan(ctx context.Context) error {
	var legacy *bool
	changed := false
	for part, files := range r.files {
		if p, ok := r.rec.Parts[part]; ok && (p.Step != stepAttached || p.Key == files[0].Key) {
			continue
		}
		if legacy == nil {
			t, err := r.ch.Table(ctx, r.rec.Table.Database, r.rec.Table.Table)
			if err != nil {
				return err
			}
			legacy = &t.LegacySyntax
		}
		local, err := localName(part, *legacy)
		if err != nil {
			return err
		}
		r.rec.Parts[part] = &importPart{Local: local, Key: files[0].Key}
		changed = true
	}
	if !changed {
		return nil
	}
	return r.c.save(ctx, r.shard, r.path, r.rec, &r.version)
}

// localName returns a name for part's directory in detached/ that is one
// import's alone: part's name with both block numbers a random one.
func localName(part string, legacy bool) (string, error) {
	f := strings.Split(part, "_")
	at := 1 // PARTITION_MIN_MAX_LEVEL[_MUTATION]
	if legacy {
		at = 2 // MINDATE_MAXDATE_MIN_MAX_LEVEL[_MUTATION]
	}
	if _, ok := clickhouse.ParsePartName(part, legacy); !ok {
		return "", fmt.Errorf("objects: %q is not the name of a part", part)
	}
	n := strconv.FormatInt(1<<62+rand.Int64N(1<<62), 10)
	f[at], f[at+1] = n, n
	return strings.Join(f, "_"), nil
}

// part takes one part of the import to attached, each step recorded:
// fetched into detached/, ATTACH PART sent, attached.
func (r *importRun) part(ctx context.Context, name string) error {
	p := r.rec.Parts[name]
	dir := filepath.Join(r.detached, p.Local)
	refetched := false
	for {
		there, err := present(dir)
		if err != nil {
			return err
		}
		switch p.Step {
		case stepFetch:
			if len(r.files[name]) == 0 {
				return fmt.Errorf("%w: part %s has no file in the catalog any more", ErrNoReference, name)
			}
			if err := r.c.fetch(ctx, r.files[name], r.detached, p.Local); err != nil {
				return err
			}
			if err := r.step(ctx, p, stepFetched); err != nil {
				return err
			}
			r.c.point(StepImportFetched)
		case stepFetched:
			if !there { // removed before it was attached
				p.Step = stepFetch
				continue
			}
			if err := r.step(ctx, p, stepAttaching); err != nil {
				return err
			}
		case stepAttaching:
			if !there { // ATTACH PART moved it into the table
				return r.step(ctx, p, stepAttached)
			}
			err := r.ch.AttachPart(ctx, "xkeeper-import-"+r.rec.ID, r.rec.Table.Database, r.rec.Table.Table, p.Local)
			if err == nil {
				r.c.point(StepImportAttached)
				return r.step(ctx, p, stepAttached)
			}
			if refetched || !refused(err) {
				return err
			}
			if still, serr := present(dir); serr != nil || !still {
				return err // taken all the same: the next run finds it attached
			}
			// The server refused the files it left there (damaged since
			// the download): fetch them again, once a run.
			refetched = true
			r.c.log.Warn("objects: import: part refused, fetching it again", "part", name, "err", err)
			if err := r.step(ctx, p, stepFetch); err != nil {
				return err
			}
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// step records the part's next step.
func (r *importRun) step(ctx context.Context, p *importPart, step string) error {
	p.Step = step
	return r.c.save(ctx, r.shard, r.path, r.rec, &r.version)
}

// refused reports whether err is the server's answer (an exception),
// not a connection lost with the statement's outcome unknown.
func refused(err error) bool {
	var e *chgo.Exception
	return errors.As(err, &e)
}

// present reports whether path exists.
func present(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// fetch downloads a part's files into detached/local, through local's
// temporary directory (not a part name: ATTACH PARTITION passes it by)
// renamed into place once whole. Both names are one import's alone. The
// rename never replaces a directory: one there already is this import's
// download, by a run that stopped before recording it.
func (c *Catalog) fetch(ctx context.Context, files []Entry, detached, local string) error {
	tmp := filepath.Join(detached, local+".xkeeper-tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := c.bucket.Download(ctx, f.Key, filepath.Join(tmp, f.File)); err != nil {
			return err
		}
	}
	err := os.Rename(tmp, filepath.Join(detached, local))
	if errors.Is(err, fs.ErrExist) {
		return os.RemoveAll(tmp)
	}
	return err
}
