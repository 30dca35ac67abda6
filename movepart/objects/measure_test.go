package objects_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// TestMeasureCatalog measures, with fsync on: links and unlinks per second
// across 2 shards; a zero-copy move of a partition of 100 parts × 10 files
// against moving the same partition by copying its objects (S3 server-side
// copies, registered for the destination, the source's unlinked); and the
// audit's time per object. Run it with XKEEPER_BENCH=1.
func TestMeasureCatalog(t *testing.T) {
	if os.Getenv("XKEEPER_BENCH") == "" {
		t.Skip("a measurement: set XKEEPER_BENCH=1")
	}
	e := &env{keepers: testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 3, Fsync: true}), s3: testenv.StartS3(t)}
	e.configure(t, 2)
	c := e.catalog(t, nil)
	ta, tb := e.tables[0], e.tables[1] // shards a and b
	bctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Links and unlinks across shards: 16 clients, each linking a part
	// file on b to its own object homed on a, then unlinking it; then all
	// 16 on one object, whose count they then take turns to change.
	const clients, window = 16, 5 * time.Second
	for w := range clients {
		key := "parts/own/" + strconv.Itoa(w)
		e.upload(t, key)
		if err := c.Register(bctx, ref(ta, "base", strconv.Itoa(w)), key); err != nil {
			t.Fatal(err)
		}
	}
	for _, shared := range []bool{false, true} {
		var n atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(window)
		for w := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cc := e.catalog(t, nil)
				src := ref(ta, "base", strconv.Itoa(w))
				if shared {
					src = ref(ta, "base", "0")
				}
				for i := 0; time.Now().Before(end); i++ {
					dst := ref(tb, fmt.Sprintf("w%d-%v", w, shared), strconv.Itoa(i))
					if err := cc.Link(bctx, src, dst); err != nil {
						t.Error(err)
						return
					}
					if err := cc.Unlink(bctx, dst); err != nil {
						t.Error(err)
						return
					}
					n.Add(2)
				}
			}()
		}
		wg.Wait()
		what := "each on its own object"
		if shared {
			what = "all on one object"
		}
		t.Logf("links+unlinks across 2 shards, %d clients %s: %.0f/s", clients, what, float64(n.Load())/window.Seconds())
	}

	// A partition of 100 parts × 10 files of 64 KiB.
	const parts, files, size = 100, 10, 64 << 10
	payload := bytes.Repeat([]byte("x"), size)
	for p := range parts {
		for f := range files {
			key := fmt.Sprintf("parts/m/%d/%d", p, f)
			if _, err := e.s3.Client().PutObject(bctx, e.s3.Config.Bucket, key, bytes.NewReader(payload), size, minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := c.Register(bctx, ref(ta, fmt.Sprintf("202401_%d_%d_0", p, p), strconv.Itoa(f)), key); err != nil {
				t.Fatal(err)
			}
		}
	}
	began := time.Now()
	moved, err := c.MovePartition(bctx, ta, tb, "202401")
	zero := time.Since(began)
	if err != nil || moved != parts*files {
		t.Fatalf("zero-copy move: %d %v", moved, err)
	}
	// The copy-based move of the same partition, back to a: every object
	// copied in S3, the copy registered for a, the original unlinked.
	began = time.Now()
	for _, r := range must(c.Refs(bctx, tb)) {
		if r.Part == "base" {
			continue
		}
		dst := "parts/copy/" + r.Key
		if _, err := e.s3.Client().CopyObject(bctx, minio.CopyDestOptions{Bucket: e.s3.Config.Bucket, Object: dst},
			minio.CopySrcOptions{Bucket: e.s3.Config.Bucket, Object: r.Key}); err != nil {
			t.Fatal(err)
		}
		if err := c.Register(bctx, ref(ta, r.Part, r.File), dst); err != nil {
			t.Fatal(err)
		}
		if err := c.Unlink(bctx, ref(tb, r.Part, r.File)); err != nil {
			t.Fatal(err)
		}
	}
	copied := time.Since(began)
	t.Logf("move of a partition of %d parts × %d files (%d KiB each) between shards: zero-copy %v, by copying %v: %.0f× faster",
		parts, files, size>>10, zero.Round(time.Millisecond), copied.Round(time.Millisecond), float64(copied)/float64(zero))

	// More objects for the audit's figure: XKEEPER_BENCH_OBJECTS=N adds N
	// (16 writers upload and register them).
	if extra, _ := strconv.Atoi(os.Getenv("XKEEPER_BENCH_OBJECTS")); extra > 0 {
		var next atomic.Int64
		var wg sync.WaitGroup
		began := time.Now()
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(extra); i = next.Add(1) {
					key := fmt.Sprintf("parts/bulk/%d", i)
					if _, err := e.s3.Client().PutObject(bctx, e.s3.Config.Bucket, key, bytes.NewReader(nil), 0, minio.PutObjectOptions{}); err != nil {
						t.Error(err)
						return
					}
					if err := c.Register(bctx, ref(e.tables[int(i)%2], fmt.Sprintf("bulk_%d_%d_0", i%1000, i%1000), strconv.FormatInt(i, 10)), key); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("uploaded and registered %d more objects in %v", extra, time.Since(began).Round(time.Second))
	}
	began = time.Now()
	rep, err := c.Audit(bctx)
	took := time.Since(began)
	require.NoError(t, err)
	t.Logf("audit of %d objects, %d references, %d in the bucket: %v, %.0f µs per object (1M objects: about %v)",
		rep.Objects, rep.References, rep.InBucket, took.Round(time.Millisecond), float64(took.Microseconds())/float64(rep.Objects),
		(took / time.Duration(rep.Objects) * 1_000_000).Round(time.Second))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
