package objects

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Kinds of audit findings.
const (
	CountMismatch     = "count-mismatch"     // an object's count differs from its references
	MissingObject     = "missing-object"     // referenced, not in S3: lost data
	DanglingReference = "dangling-reference" // a reference to an object no home shard has
	Orphan            = "orphan"             // in S3, in no catalog, past the grace period: leaked space
	AbandonedExport   = "abandoned-export"   // an export's record unchanged for longer than the grace period
)

// Finding is one thing the catalog audit found.
type Finding struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

// AuditReport is the catalog audit's result.
type AuditReport struct {
	Objects    int       `json:"objects"`
	References int       `json:"references"`
	InBucket   int       `json:"in_bucket"`
	Deletable  int       `json:"deletable"` // bytes waiting for GC: not a problem
	Collected  int       `json:"collected"` // tombstones of collected keys (Objects does not count them)
	Findings   []Finding `json:"findings"`
}

// Audit lists the bucket against every shard: each object's count against
// the references that exist on all shards, references to objects missing
// from S3 or from their home shard, and orphans past the grace period.
func (c *Catalog) Audit(ctx context.Context) (*AuditReport, error) {
	rep := &AuditReport{}
	refs := map[string][]string{} // key → referring znodes
	objects := map[string]Object{}
	for _, sh := range c.cluster.Shards {
		tables, err := c.children(ctx, sh.Name, RefsDir)
		if err != nil {
			return nil, err
		}
		for _, name := range tables {
			table, ok := unescapeTable(name)
			if !ok {
				continue
			}
			err := c.eachRef(ctx, sh.Name, table, func(string) bool { return true }, func(ref Ref, rf Reference, _ []byte, _, _ proto.Stat) error {
				rep.References++
				refs[rf.Key] = append(refs[rf.Key], sh.Name+":"+ref.String())
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		err = c.eachObject(ctx, sh.Name, func(key string, o Object, _ proto.Stat) error {
			objects[key] = o
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	inFlight, err := c.Exports(ctx)
	if err != nil {
		return nil, err
	}
	c.abandoned(inFlight, rep)
	exports := c.exporting(inFlight)
	inBucket := map[string]bool{}
	cutoff := time.Now().Add(-c.cluster.S3.Grace())
	var orphans []string
	for info, err := range c.bucket.List(ctx, c.cluster.S3.Prefix) {
		if err != nil {
			return nil, err
		}
		inBucket[info.Key] = true
		if _, ok := objects[info.Key]; !ok && len(refs[info.Key]) == 0 && info.Modified.Before(cutoff) && !inExport(exports, info.Key) {
			orphans = append(orphans, info.Key)
		}
	}
	rep.InBucket = len(inBucket)
	for _, key := range slices.Sorted(maps.Keys(objects)) {
		o := objects[key]
		if o.State == Gone {
			rep.Collected++
		} else {
			rep.Objects++
		}
		if o.State == Deletable || o.State == Gone && inBucket[key] {
			rep.Deletable++ // bytes waiting for GC
		}
		if n := int64(len(refs[key])); n != o.Refs {
			rep.Findings = append(rep.Findings, Finding{Kind: CountMismatch, Key: key,
				Detail: fmt.Sprintf("count %d, %d references exist: %v", o.Refs, n, refs[key])})
		}
		if o.State == Live && !inBucket[key] {
			rep.Findings = append(rep.Findings, Finding{Kind: MissingObject, Key: key,
				Detail: fmt.Sprintf("live with %d references but not in the bucket", o.Refs)})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(refs)) {
		if _, ok := objects[key]; !ok {
			rep.Findings = append(rep.Findings, Finding{Kind: DanglingReference, Key: key,
				Detail: fmt.Sprintf("referred to by %v but no shard has the object", refs[key])})
		}
	}
	for _, key := range orphans {
		rep.Findings = append(rep.Findings, Finding{Kind: Orphan, Key: key, Detail: "in the bucket, in no catalog, older than the grace period"})
	}
	return rep, nil
}

// abandoned adds a finding for each export whose record has not changed
// for longer than the grace period: its uploads are kept until
// AbortExport (or the export run again) ends it.
func (c *Catalog) abandoned(exports []ExportInfo, rep *AuditReport) {
	for _, e := range exports {
		if age := time.Since(e.Saved); age > c.cluster.S3.Grace() {
			rep.Findings = append(rep.Findings, Finding{Kind: AbandonedExport, Key: c.exportPrefix(e.ID),
				Detail: fmt.Sprintf("export of partition %s of %s at step %s, unchanged for %v: run it again, or abort it "+
					"(xkeeper s3 abort-export) and remove its frozen copy %s", e.Partition, e.Table, e.Step, age.Round(time.Second), e.Shadow)})
		}
	}
}
