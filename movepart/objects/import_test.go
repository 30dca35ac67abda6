package objects_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
)

// transferEnv is a workflow setup with a bucket: tables on ca export,
// tables on cb import.
type transferEnv struct {
	movetest.Env
	c      *objects.Catalog
	ca, cb *clickhouse.Conn
}

func startTransfer(t *testing.T) transferEnv {
	e := movetest.Start(t)
	s3 := testenv.StartS3(t)
	e.Config.S3 = s3.Config
	b, err := objects.OpenS3(movetest.Ctx(t), e.Config.S3)
	require.NoError(t, err)
	c := objects.New(movetest.Router(t, e.Config), b, testenv.TestLogger(t))
	return transferEnv{Env: e, c: c, ca: e.Conn(t, "ca"), cb: e.Conn(t, "cb")}
}

// toCatalog exports src's partition and moves its references to dst
// (zero-copy), returning src's partition as it was exported.
func (te transferEnv) toCatalog(t *testing.T, src, dst movetest.Table) clickhouse.Fingerprint {
	t.Helper()
	want := te.Fingerprint(t, src.Ref, movetest.Partition)
	_, err := te.c.Export(movetest.Ctx(t), te.ca, src.Ref, movetest.Partition)
	require.NoError(t, err)
	_, err = te.c.MovePartition(movetest.Ctx(t), src.Ref, dst.Ref, movetest.Partition)
	require.NoError(t, err)
	return want
}

// importOnce runs an import into dst that stops (panics, as a crash
// would) at step crashAt, if it gets there; "" runs it through.
func (te transferEnv) importOnce(t *testing.T, dst movetest.Table, crashAt string) (parts []string, err error) {
	t.Helper()
	te.c.Point = func(step string) {
		if step == crashAt {
			panic(step)
		}
	}
	defer func() {
		te.c.Point = nil
		if p := recover(); p != nil {
			err = fmt.Errorf("crashed at %v", p)
		}
	}()
	return te.c.Import(movetest.Ctx(t), te.cb, dst.Ref, movetest.Partition)
}

// detached returns dst's detached/ directory.
func (te transferEnv) detached(t *testing.T, dst movetest.Table) string {
	t.Helper()
	dp, err := te.cb.DataPath(movetest.Ctx(t), dst.Ref.Database, dst.Ref.Table)
	require.NoError(t, err)
	return filepath.Join(dp, "detached")
}

// tree returns every file under dir with a hash of its bytes.
func tree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return out
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, dir)] = sha256.Sum256(b)
		return err
	})
	require.NoError(t, err)
	return out
}

// sum is the fingerprint of two partitions' rows together.
func sum(a, b clickhouse.Fingerprint) clickhouse.Fingerprint {
	return clickhouse.Fingerprint{Rows: a.Rows + b.Rows, Hash: a.Hash + b.Hash}
}

// TestImportBesideOperatorPart imports a part whose name is the name of
// a part an operator detached from the destination table: the
// operator's part stays as it was, is not attached by the import (also
// when the import stops after its download and runs again), and can be
// attached by the operator afterwards.
func TestImportBesideOperatorPart(t *testing.T) {
	te := startTransfer(t)
	for i, crashAt := range []string{"", objects.StepImportFetched} {
		t.Run(fmt.Sprintf("crash-at-%q", crashAt), func(t *testing.T) {
			db := fmt.Sprintf("op%d", i)
			src := te.NewTable(t, "ca:"+db+".src", false, 1000, 1)
			dst := te.NewTable(t, "cb:"+db+".dst", false, 300, 2)
			mine := te.Fingerprint(t, dst.Ref, movetest.Partition)
			dst.Exec(t, "ALTER TABLE "+db+".dst DETACH PARTITION 202401")
			own := filepath.Join(te.detached(t, dst), "202401_1_1_0")
			before := tree(t, own)
			require.NotEmpty(t, before, "the operator's detached part")
			srcParts, err := te.ca.Parts(movetest.Ctx(t), db, "src", movetest.Partition)
			require.NoError(t, err)
			require.Equal(t, "202401_1_1_0", srcParts[0].Name, "the source part has the operator's part's name")

			want := te.toCatalog(t, src, dst)
			if _, err := te.importOnce(t, dst, crashAt); err != nil {
				t.Logf("first run: %v; running again", err)
				_, err = te.importOnce(t, dst, "")
				require.NoError(t, err)
			}
			require.Equal(t, want, te.Fingerprint(t, dst.Ref, movetest.Partition), "the destination holds the imported rows alone")
			require.Equal(t, before, tree(t, own), "the operator's part is intact")

			dst.Exec(t, "ALTER TABLE "+db+".dst ATTACH PART '202401_1_1_0'")
			require.Equal(t, sum(want, mine), te.Fingerprint(t, dst.Ref, movetest.Partition), "the operator's part attaches")
		})
	}
}

// TestImportFetchedAgain stops an import once a part is downloaded into
// detached/, then loses or damages the download: the next run fetches
// the part again and attaches it, rows exactly once.
func TestImportFetchedAgain(t *testing.T) {
	te := startTransfer(t)
	for i, damage := range []struct {
		name string
		do   func(t *testing.T, dir string)
	}{
		{"removed", func(t *testing.T, dir string) { require.NoError(t, os.RemoveAll(dir)) }},
		{"truncated", func(t *testing.T, dir string) {
			bins, err := filepath.Glob(filepath.Join(dir, "*.bin"))
			require.NoError(t, err)
			require.NotEmpty(t, bins)
			require.NoError(t, os.Truncate(bins[0], 3))
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			db := fmt.Sprintf("fa%d", i)
			src := te.NewTable(t, "ca:"+db+".src", false, 1000, 3)
			dst := te.NewTable(t, "cb:"+db+".dst", false, 0, 4)
			want := te.toCatalog(t, src, dst)
			_, err := te.importOnce(t, dst, objects.StepImportFetched)
			require.ErrorContains(t, err, "crashed at "+objects.StepImportFetched)

			fetched, err := os.ReadDir(te.detached(t, dst))
			require.NoError(t, err)
			require.Len(t, fetched, 1, "one part downloaded")
			damage.do(t, filepath.Join(te.detached(t, dst), fetched[0].Name()))

			parts, err := te.importOnce(t, dst, "")
			require.NoError(t, err)
			require.Len(t, parts, 1)
			require.Equal(t, want, te.Fingerprint(t, dst.Ref, movetest.Partition), "rows exactly once")
			left, err := os.ReadDir(te.detached(t, dst))
			require.NoError(t, err)
			require.Empty(t, left, "nothing left in detached/")
		})
	}
}

// TestImportNewReferences imports a partition, then moves a later export
// of the same partition into the same table and imports again: the new
// part is attached, the first one not again.
func TestImportNewReferences(t *testing.T) {
	te := startTransfer(t)
	src := te.NewTable(t, "ca:nr.src", false, 1000, 5)
	dst := te.NewTable(t, "cb:nr.dst", false, 0, 6)
	first := te.toCatalog(t, src, dst)
	_, err := te.importOnce(t, dst, "")
	require.NoError(t, err)
	require.Equal(t, first, te.Fingerprint(t, dst.Ref, movetest.Partition))

	src.Exec(t, "ALTER TABLE nr.src DROP PARTITION 202401")
	src.Insert(t, "2024-01-01", 400, 9)
	second := te.toCatalog(t, src, dst)
	for range 2 { // and once more: nothing attached twice
		parts, err := te.importOnce(t, dst, "")
		require.NoError(t, err)
		require.Len(t, parts, 2)
		require.Equal(t, sum(first, second), te.Fingerprint(t, dst.Ref, movetest.Partition))
	}
}

// TestExportComparesParts runs an export again after it succeeded: with
// the table's parts unchanged it reports the registered files; once the
// partition got another part it refuses, rather than calling the
// catalog's copy the partition.
func TestExportComparesParts(t *testing.T) {
	te := startTransfer(t)
	src := te.NewTable(t, "ca:ec.src", false, 1000, 7)
	files, err := te.c.Export(movetest.Ctx(t), te.ca, src.Ref, movetest.Partition)
	require.NoError(t, err)
	again, err := te.c.Export(movetest.Ctx(t), te.ca, src.Ref, movetest.Partition)
	require.NoError(t, err)
	require.Equal(t, files, again)

	src.Insert(t, "2024-01-01", 200, 8)
	parts, err := te.ca.Parts(movetest.Ctx(t), "ec", "src", movetest.Partition)
	require.NoError(t, err)
	// Two parts, or one if they merged meanwhile: not the part exported.
	i := slices.IndexFunc(parts, func(p clickhouse.Part) bool { return p.Name != files[0].Part })
	require.GreaterOrEqual(t, i, 0)
	_, err = te.c.Export(movetest.Ctx(t), te.ca, src.Ref, movetest.Partition)
	require.ErrorIs(t, err, objects.ErrExists)
	require.ErrorContains(t, err, parts[i].Name)
	refs, err := te.c.Refs(movetest.Ctx(t), src.Ref)
	require.NoError(t, err)
	require.Equal(t, files, refs, "the catalog unchanged")
}
