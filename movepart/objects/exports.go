package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
)

// ErrAborted says an export's record was deleted by AbortExport.
var ErrAborted = errors.New("objects: the export was aborted")

// ExportInfo is an export in flight, as Exports lists it.
type ExportInfo struct {
	ID        string            `json:"id"`
	Table     movepart.TableRef `json:"table"`
	Partition string            `json:"partition"`
	Step      string            `json:"step"`
	Shadow    string            `json:"shadow,omitempty"` // the frozen copy, on the ClickHouse server's host
	Files     int               `json:"files"`
	Saved     time.Time         `json:"saved"` // the record's last change, by the keeper's clock
	Shard     string            `json:"shard"`
}

// Exports lists the exports in flight on every shard: each record an
// Export wrote and has not yet ended, whether its process runs or not.
func (c *Catalog) Exports(ctx context.Context) ([]ExportInfo, error) {
	var out []ExportInfo
	for _, sh := range c.cluster.Shards {
		names, err := c.children(ctx, sh.Name, ExportsDir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			data, stat, found, err := c.read(ctx, sh.Name, ExportsDir+"/"+name)
			if err != nil {
				return nil, err
			}
			var rec exportRecord
			if !found || json.Unmarshal(data, &rec) != nil {
				continue
			}
			out = append(out, exportInfo(&rec, stat, sh.Name))
		}
	}
	return out, nil
}

// exportPrefix is where export id's uploads go.
func (c *Catalog) exportPrefix(id string) string { return c.cluster.S3.Prefix + "exports/" + id + "/" }

// AbortExport ends the export of partition of table in flight, whose
// process is gone: its record is deleted (conditional on the version
// read, so an export still running either registers first or fails with
// ErrAborted), and its uploads become orphans that GC collects after the
// grace period. The frozen copy on the ClickHouse server's host stays for
// the operator to remove; the returned record names it.
func (c *Catalog) AbortExport(ctx context.Context, table movepart.TableRef, partition string) (*ExportInfo, error) {
	shard, err := c.shardOf(table)
	if err != nil {
		return nil, err
	}
	path := ExportsDir + "/" + transferName(table, partition)
	data, stat, found, err := c.read(ctx, shard, path)
	if err != nil {
		return nil, err
	}
	var rec exportRecord
	if !found || json.Unmarshal(data, &rec) != nil {
		return nil, fmt.Errorf("%w: no export of partition %s of %s in flight", ErrNoReference, partition, table)
	}
	if err := c.commit(ctx, map[string][]client.Op{shard: {client.DeleteOp(path, stat.Version)}}, nil); err != nil {
		return nil, err
	}
	info := exportInfo(&rec, stat, shard)
	return &info, nil
}

func exportInfo(rec *exportRecord, stat proto.Stat, shard string) ExportInfo {
	return ExportInfo{ID: rec.ID, Table: rec.Table, Partition: rec.Partition, Step: rec.Step, Shadow: rec.Shadow,
		Files: len(rec.Files), Saved: time.UnixMilli(stat.Mtime), Shard: shard}
}

// exporting returns the key prefixes of exports in flight: what they
// uploaded or will upload is not an orphan, whatever its age.
func (c *Catalog) exporting(exports []ExportInfo) map[string]bool {
	keys := map[string]bool{}
	for _, e := range exports {
		keys[c.exportPrefix(e.ID)] = true
	}
	return keys
}

// unregistered reports whether an export's files are not in the catalog
// once its record is gone: aborted, not ended by its registration.
func (c *Catalog) unregistered(ctx context.Context, rec *exportRecord) bool {
	f := rec.Files[0]
	return !c.refersTo(ctx, Ref{Table: rec.Table, Part: f.Part, File: f.File}, f.Key)
}
