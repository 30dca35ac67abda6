package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
)

// Directories of the round trip's records, on the table's shard.
const (
	ExportsDir = Dir + "/exports" // one export in flight per table partition
	ImportsDir = Dir + "/imports" // one import in flight per table partition
)

// Steps of the round trip, for fault injection (Catalog.Point).
const (
	StepExportFrozen   = "export-frozen"   // parts frozen, files listed in the record
	StepExportUploaded = "export-uploaded" // every file in the bucket
	StepExportCleaned  = "export-cleaned"  // shadow copy removed; the registration comes next
	StepImportFetched  = "import-fetched"  // a part downloaded into detached/, recorded
	StepImportAttached = "import-attached" // that part attached, not yet recorded
)

// exportRecord is an export in flight.
type exportRecord struct {
	ID        string            `json:"id"`
	Table     movepart.TableRef `json:"table"`
	Partition string            `json:"partition"`
	Step      string            `json:"step"`             // intent, frozen, uploaded
	Shadow    string            `json:"shadow,omitempty"` // the frozen copy of the table's directory
	Files     []Entry           `json:"files,omitempty"`
}

func transferName(t movepart.TableRef, partition string) string {
	return esc(t.Server) + ":" + esc(t.Database) + "." + esc(t.Table) + "@" + esc(partition)
}

// record reads or creates a round-trip record at path on shard; fresh
// makes a new one. It returns the record's version.
func (c *Catalog) record(ctx context.Context, shard, path string, v any, fresh func() any) (int32, error) {
	for {
		data, stat, found, err := c.read(ctx, shard, path)
		if err != nil {
			return 0, err
		}
		if found {
			return stat.Version, json.Unmarshal(data, v)
		}
		var resp proto.PathRequest
		err = c.r.Do(ctx, shard, proto.OpCreate, c.store.CreateOp(path, encode(fresh()), 0).Req, &resp)
		if err != nil && !errors.Is(err, proto.ErrNodeExists) {
			return 0, c.store.Explain(err)
		}
	}
}

// save writes a round-trip record if its version is still the one read.
func (c *Catalog) save(ctx context.Context, shard, path string, v any, version *int32) error {
	var resp proto.StatResponse
	err := c.r.Do(ctx, shard, proto.OpSetData, &proto.SetDataRequest{Path: path, Data: encode(v), Version: *version}, &resp)
	if err != nil {
		return fmt.Errorf("objects: save %s: %w", path, c.store.Explain(err))
	}
	*version = resp.Stat.Version
	return nil
}

// Export puts partition of table (on the server ch, whose files this
// process can read) into the bucket and registers every file of its parts
// for the table: FREEZE PARTITION, upload, then one transaction that
// registers them all and ends the export's record. Run again after a crash
// it resumes from the record; the files are registered exactly once. It
// returns the registered files.
func (c *Catalog) Export(ctx context.Context, ch *clickhouse.Conn, table movepart.TableRef, partition string) ([]Entry, error) {
	shard, err := c.shardOf(table)
	if err != nil {
		return nil, err
	}
	if err := c.ensure(ctx, shard, movepart.Root, Dir, RefsDir, ObjectsDir, ExportsDir, tableDir(table)); err != nil {
		return nil, err
	}
	path := ExportsDir + "/" + transferName(table, partition)
	// Exported already (a rerun after success): nothing to do.
	if _, _, found, err := c.read(ctx, shard, path); err != nil || !found {
		if err != nil {
			return nil, err
		}
		if done, err := c.exported(ctx, ch, shard, table, partition); err != nil || len(done) > 0 {
			return done, err
		}
	}
	var rec exportRecord
	version, err := c.record(ctx, shard, path, &rec, func() any {
		return exportRecord{ID: uuid.NewString(), Table: table, Partition: partition, Step: "intent"}
	})
	if err != nil {
		return nil, err
	}
	for {
		switch rec.Step {
		case "intent":
			if err := c.freeze(ctx, ch, &rec); err != nil {
				return nil, err
			}
			rec.Step = "frozen"
			if err := c.save(ctx, shard, path, rec, &version); err != nil {
				return nil, err
			}
			c.point(StepExportFrozen)
		case "frozen":
			for _, f := range rec.Files {
				if err := c.bucket.Upload(ctx, f.Key, filepath.Join(rec.Shadow, f.Part, f.File)); err != nil {
					return nil, err
				}
			}
			rec.Step = "uploaded"
			if err := c.save(ctx, shard, path, rec, &version); err != nil {
				return nil, err
			}
			c.point(StepExportUploaded)
		case "uploaded":
			if err := c.registerExport(ctx, shard, path, version, &rec); err != nil {
				return nil, err
			}
			// The frozen copy goes only once the files are registered: until
			// then a rerun may upload them again.
			if err := os.RemoveAll(rec.Shadow); err != nil {
				return nil, fmt.Errorf("objects: remove the frozen copy %s: %w", rec.Shadow, err)
			}
			c.point(StepExportCleaned)
			return rec.Files, nil
		default:
			return nil, fmt.Errorf("objects: export record %s has an unknown step %q", path, rec.Step)
		}
	}
}

// exported returns the files of partition of table the catalog holds
// (none if it holds none): an export's that succeeded, if the table's
// parts are still those registered. Other parts (written or merged
// since) are an error: the catalog's copy is not the partition any more.
func (c *Catalog) exported(ctx context.Context, ch *clickhouse.Conn, shard string, table movepart.TableRef, partition string) ([]Entry, error) {
	var done []Entry
	var registered []string
	err := c.eachRef(ctx, shard, table, func(p string) bool { return strings.HasPrefix(p, partition+"_") },
		func(ref Ref, rf Reference, _ []byte, _, _ proto.Stat) error {
			done = append(done, Entry{Part: ref.Part, File: ref.File, Reference: rf})
			if !slices.Contains(registered, ref.Part) {
				registered = append(registered, ref.Part)
			}
			return nil
		})
	if err != nil || len(done) == 0 {
		return nil, err
	}
	parts, err := ch.Parts(ctx, table.Database, table.Table, partition)
	if err != nil {
		return nil, err
	}
	var now []string
	for _, p := range parts {
		now = append(now, p.Name)
	}
	slices.Sort(now)
	if !slices.Equal(registered, now) {
		return nil, fmt.Errorf("%w: partition %s of %s is in the catalog with parts %v, and the table has parts %v now (written or merged since that export)",
			ErrExists, partition, table, registered, now)
	}
	return done, nil
}

// freeze freezes the partition and lists its files in the record.
func (c *Catalog) freeze(ctx context.Context, ch *clickhouse.Conn, rec *exportRecord) error {
	t := rec.Table
	dataPath, err := ch.DataPath(ctx, t.Database, t.Table)
	if err != nil {
		return err
	}
	// data_path is ROOT/data/DB/TABLE/, with DB and TABLE escaped as the
	// server escapes file names; FREEZE links the parts into
	// ROOT/shadow/N/data/DB/TABLE/, N read from ROOT/shadow/increment.txt.
	dataPath = strings.TrimSuffix(dataPath, "/")
	root := filepath.Dir(filepath.Dir(filepath.Dir(dataPath)))
	// 18.16 has no FREEZE ... WITH NAME: the snapshot is ours if the
	// server's counter moved by exactly one (no other FREEZE meanwhile).
	before, err := shadowIncrement(root)
	if err != nil {
		return err
	}
	if err := ch.FreezePartition(ctx, "xkeeper-export-"+rec.ID, t.Database, t.Table, rec.Partition); err != nil {
		return err
	}
	n, err := shadowIncrement(root)
	if err != nil {
		return err
	}
	if n != before+1 {
		return fmt.Errorf("objects: another FREEZE ran on %s while exporting (shadow counter %d → %d); run the export again", ch.Server().Name, before, n)
	}
	rec.Shadow = filepath.Join(root, "shadow", strconv.Itoa(n), "data", filepath.Base(filepath.Dir(dataPath)), filepath.Base(dataPath))
	parts, err := os.ReadDir(rec.Shadow)
	if err != nil {
		return fmt.Errorf("objects: the frozen partition: %w", err)
	}
	rec.Files = nil
	for _, p := range parts {
		if !p.IsDir() || !strings.HasPrefix(p.Name(), rec.Partition+"_") {
			continue
		}
		files, err := os.ReadDir(filepath.Join(rec.Shadow, p.Name()))
		if err != nil {
			return err
		}
		for _, f := range files {
			key := c.exportPrefix(rec.ID) + p.Name() + "/" + f.Name()
			rec.Files = append(rec.Files, Entry{Part: p.Name(), File: f.Name(), Reference: Reference{Key: key}})
		}
	}
	if len(rec.Files) == 0 {
		return fmt.Errorf("%w: partition %s of %s has no parts to export", clickhouse.ErrNoPartition, rec.Partition, t)
	}
	return nil
}

// registerExport registers every exported file and deletes the record, in
// one transaction over the table's shard and the keys' homes.
func (c *Catalog) registerExport(ctx context.Context, shard, path string, version int32, rec *exportRecord) error {
	ops := map[string][]client.Op{}
	bumped := map[string]bool{}
	for i, f := range rec.Files {
		ref := Ref{Table: rec.Table, Part: f.Part, File: f.File}
		home := c.homeOf(f.Key)
		rec.Files[i].Home = home
		if err := c.ensure(ctx, shard, refDirs(ref)...); err != nil {
			return err
		}
		if err := c.ensure(ctx, home, objectDirs(f.Key)...); err != nil {
			return err
		}
		ops[shard] = append(ops[shard], c.store.CreateOp(refPath(ref), encode(Reference{Key: f.Key, Home: home}), 0))
		ops[home] = append(ops[home], c.store.CreateOp(objectPath(f.Key), encode(Object{Key: f.Key, Refs: 1, State: Live}), 0))
		if !bumped[f.Part] {
			bumped[f.Part] = true
			ops[shard] = append(ops[shard], bumpPart(rec.Table, f.Part, -1))
		}
	}
	ops[shard] = append(ops[shard], client.DeleteOp(path, version))
	err := c.commit(ctx, ops, nil)
	if err == nil {
		return nil
	}
	// No answer, or a refusal: the record is gone if an attempt whose
	// answer was lost registered everything, or if AbortExport ended it.
	if _, _, found, rerr := c.read(ctx, shard, path); rerr != nil || !found {
		if rerr == nil && c.unregistered(ctx, rec) {
			rerr = fmt.Errorf("%w: partition %s of %s (export %s); run the export again", ErrAborted, rec.Partition, rec.Table, rec.ID)
		}
		return rerr
	}
	if errors.Is(err, ErrConflict) {
		// The part files are registered already, by an earlier export of
		// the partition: this one ends without registering (its uploads
		// become orphans, collected after the grace period).
		var resp proto.Empty
		if derr := c.r.Do(ctx, shard, proto.OpDelete, &proto.PathVersionRequest{Path: path, Version: version}, &resp); derr != nil && !errors.Is(derr, proto.ErrNoNode) {
			return c.store.Explain(derr)
		}
		return fmt.Errorf("%w: partition %s of %s is in the catalog already (exported before): %v", ErrExists, rec.Partition, rec.Table, err)
	}
	return err
}

// inExport reports whether key belongs to an export in flight.
func inExport(exports map[string]bool, key string) bool {
	for prefix := range exports {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// shadowIncrement reads the server's FREEZE counter (0 before the first).
func shadowIncrement(root string) (int, error) {
	b, err := os.ReadFile(filepath.Join(root, "shadow", "increment.txt"))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(root, "data")); serr != nil {
			return 0, fmt.Errorf("objects: export runs beside the server's data (%s): %w", root, serr)
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("objects: export runs beside the server's data (%s): %w", root, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("objects: %s/shadow/increment.txt: %w", root, err)
	}
	return n, nil
}
