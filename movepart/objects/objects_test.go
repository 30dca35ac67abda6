package objects_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a cluster of shards, a real S3 gateway, and tables t0, t1, … of a
// ClickHouse server "ch" (never contacted) spread over the shards.
type env struct {
	keepers *testenv.Cluster
	s3      *testenv.S3
	cfg     *config.Cluster
	tables  []movepart.TableRef
}

func start(t *testing.T, shards, members int) *env {
	return startWith(t, testenv.ClusterOptions{Shards: shards, Members: members})
}

func startWith(t *testing.T, o testenv.ClusterOptions) *env {
	e := &env{keepers: testenv.StartCluster(t, o), s3: testenv.StartS3(t)}
	e.configure(t, o.Shards)
	return e
}

// configure writes e's cluster file: the bucket, 2 tables per shard, and
// security.auth (the catalog's znodes are protected).
func (e *env) configure(t *testing.T, shards int) {
	c := *e.keepers.Config
	c.ClickHouse.Servers = []config.ClickHouseServer{{Name: "ch", Address: "127.0.0.1:1"}}
	c.S3 = config.S3{Endpoint: "127.0.0.1:1", Bucket: "none", Prefix: "parts/"} // no S3 (a test's own Bucket)
	if e.s3 != nil {
		c.S3 = e.s3.Config
	}
	c.Security.Auth = "xkeeper:objects-test"
	for i := range 2 * shards {
		t := movepart.TableRef{Server: "ch", Database: "db", Table: "t" + strconv.Itoa(i)}
		e.tables = append(e.tables, t)
		c.Tables = append(c.Tables, config.Table{Server: "ch", Database: "db", Table: t.Table, Shard: c.Shards[i%shards].Name})
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	e.cfg = &c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// catalog returns a catalog with its own router over e's cluster.
func (e *env) catalog(t *testing.T, c *config.Cluster) *objects.Catalog {
	if c == nil {
		c = e.cfg
	}
	r := movetest.Router(t, c)
	b, err := objects.OpenS3(ctx(t), c.S3)
	require.NoError(t, err)
	return objects.New(r, b, testenv.TestLogger(t))
}

// upload puts an object of a few bytes under key.
func (e *env) upload(t *testing.T, key string) {
	t.Helper()
	data := []byte("content of " + key)
	if _, err := e.s3.Client().PutObject(ctx(t), e.s3.Config.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) inBucket(t *testing.T, key string) bool {
	_, err := e.s3.Client().StatObject(ctx(t), e.s3.Config.Bucket, key, minio.StatObjectOptions{})
	return err == nil
}

// clean asserts the audit finds nothing.
func clean(t *testing.T, c *objects.Catalog) *objects.AuditReport {
	t.Helper()
	rep, err := c.Audit(ctx(t))
	require.NoError(t, err)
	for _, f := range rep.Findings {
		t.Errorf("audit: %s %s: %s", f.Kind, f.Key, f.Detail)
	}
	return rep
}

func ref(t movepart.TableRef, part, file string) objects.Ref {
	return objects.Ref{Table: t, Part: part, File: file}
}

// TestCatalog registers, links across shards, moves and unlinks objects
// against a real S3 gateway, and collects what is left: on a member per
// shard, and on three nodes that each host a member of both shards.
func TestCatalog(t *testing.T) {
	t.Run("members", func(t *testing.T) { testCatalog(t, start(t, 2, 1)) })
	t.Run("nodes", func(t *testing.T) { testCatalog(t, startWith(t, testenv.ClusterOptions{Shards: 2, Nodes: 3})) })
}

func testCatalog(t *testing.T, e *env) {
	c := e.catalog(t, nil)
	t0, t1, t2 := e.tables[0], e.tables[1], e.tables[2] // shards a, b, a
	e.upload(t, "parts/k1")
	e.upload(t, "parts/k2")
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(c.Register(ctx(t), ref(t0, "all_1_1_0", "data.bin"), "parts/k1"))
	must(c.Register(ctx(t), ref(t0, "all_1_1_0", "data.mrk"), "parts/k2"))
	must(c.Register(ctx(t), ref(t0, "all_1_1_0", "data.bin"), "parts/k1")) // a retry
	if err := c.Register(ctx(t), ref(t0, "all_1_1_0", "data.bin"), "parts/k2"); !errors.Is(err, objects.ErrExists) {
		t.Fatalf("register of a used ref to another key: %v", err)
	}
	// Hard links into a table on the other shard and on the same shard.
	must(c.Link(ctx(t), ref(t0, "all_1_1_0", "data.bin"), ref(t1, "all_5_5_0", "data.bin")))
	must(c.Link(ctx(t), ref(t0, "all_1_1_0", "data.bin"), ref(t2, "all_7_7_0", "data.bin")))
	must(c.Link(ctx(t), ref(t0, "all_1_1_0", "data.bin"), ref(t1, "all_5_5_0", "data.bin"))) // a retry
	rep := clean(t, c)
	if rep.Objects != 2 || rep.References != 4 {
		t.Fatalf("audit counted %d objects, %d references; want 2, 4", rep.Objects, rep.References)
	}
	// Zero-copy move of t0's part to t3 (shard b).
	n, err := c.Move(ctx(t), t0, e.tables[3], "all_1_1_0")
	if err != nil || n != 2 {
		t.Fatalf("move: %d %v", n, err)
	}
	clean(t, c)
	// Unlink everything: both objects become deletable; GC deletes them.
	for _, r := range []objects.Ref{ref(e.tables[3], "all_1_1_0", "data.bin"), ref(e.tables[3], "all_1_1_0", "data.mrk"),
		ref(t1, "all_5_5_0", "data.bin"), ref(t2, "all_7_7_0", "data.bin")} {
		must(c.Unlink(ctx(t), r))
	}
	if err := c.Link(ctx(t), ref(t1, "all_5_5_0", "data.bin"), ref(t2, "x", "y")); !errors.Is(err, objects.ErrNoReference) {
		t.Fatalf("link from an unlinked ref: %v", err)
	}
	rep = clean(t, c)
	if rep.Deletable != 2 {
		t.Fatalf("deletable %d, want 2", rep.Deletable)
	}
	dry, err := c.GC(ctx(t), false)
	if err != nil || len(dry.Deleted) != 2 || !e.inBucket(t, "parts/k1") {
		t.Fatalf("dry GC: %+v %v", dry, err)
	}
	done, err := c.GC(ctx(t), true)
	if err != nil || len(done.Deleted) != 2 || e.inBucket(t, "parts/k1") || e.inBucket(t, "parts/k2") {
		t.Fatalf("GC: %+v %v", done, err)
	}
	if rep := clean(t, c); rep.Objects != 0 || rep.References != 0 {
		t.Fatalf("after GC: %+v", rep)
	}
}

// TestCatalogRefusals checks the bad inputs: nothing changes.
func TestCatalogRefusals(t *testing.T) {
	e := start(t, 2, 1)
	c := e.catalog(t, nil)
	t0 := e.tables[0]
	e.upload(t, "parts/old")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"UnknownObject", c.Register(ctx(t), ref(t0, "p", "f"), "parts/nope"), objects.ErrUnknownObject},
		{"OutsidePrefix", c.Register(ctx(t), ref(t0, "p", "f"), "elsewhere/x"), nil},
		{"UnknownTable", c.Register(ctx(t), ref(movepart.TableRef{Server: "zz", Database: "d", Table: "t"}, "p", "f"), "parts/old"), nil},
		{"NoSuchReference", c.Link(ctx(t), ref(t0, "p", "f"), ref(e.tables[1], "p", "f")), objects.ErrNoReference},
		{"UnlinkNothing", c.Unlink(ctx(t), ref(t0, "p", "f")), objects.ErrNoReference},
	} {
		if tc.err == nil || (tc.want != nil && !errors.Is(tc.err, tc.want)) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, tc.err, tc.want)
		} else {
			t.Logf("%s: %v", tc.name, tc.err)
		}
	}
	// Wrong credentials and an unreachable bucket are refused when opening.
	wrong := *e.cfg
	wrong.S3.SecretKey = "wrong"
	if _, err := objects.OpenS3(ctx(t), wrong.S3); err == nil {
		t.Error("wrong credentials accepted")
	}
	gone := *e.cfg
	gone.S3.Endpoint = "127.0.0.1:1"
	cctx, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	if _, err := objects.OpenS3(cctx, gone.S3); err == nil {
		t.Error("unreachable endpoint accepted")
	}
	// An upload older than the grace period is refused (GC may take it as an orphan).
	short := *e.cfg
	short.S3.OrphanGrace = time.Nanosecond
	if err := e.catalog(t, &short).Register(ctx(t), ref(t0, "p", "f"), "parts/old"); !errors.Is(err, objects.ErrTooOld) {
		t.Errorf("old upload: %v, want ErrTooOld", err)
	}
	rep := clean(t, c)
	if rep.Objects != 0 || rep.References != 0 {
		t.Errorf("refusals changed the catalog: %+v", rep)
	}
}

// TestGCCrash kills GC between the S3 delete and the znode delete, and an
// orphan collection: the next GC finishes; the audit sees orphans and
// then nothing.
func TestGCCrash(t *testing.T) {
	e := start(t, 2, 1)
	c := e.catalog(t, nil)
	t0 := e.tables[0]
	e.upload(t, "parts/a")
	if err := c.Register(ctx(t), ref(t0, "p", "f"), "parts/a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlink(ctx(t), ref(t0, "p", "f")); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash")
	c.Point = func(step string) {
		if step == objects.StepS3Deleted {
			panic(crash)
		}
	}
	func() {
		defer func() {
			if r := recover(); r != crash {
				t.Fatalf("GC did not stop at %s: %v", objects.StepS3Deleted, r)
			}
		}()
		c.GC(ctx(t), true)
	}()
	c.Point = nil
	if e.inBucket(t, "parts/a") {
		t.Fatal("object still in S3 after the step that deletes it")
	}
	rep := clean(t, c) // a deletable znode whose object is gone is not a problem
	if rep.Deletable != 1 {
		t.Fatalf("deletable %d, want 1", rep.Deletable)
	}
	if done, err := c.GC(ctx(t), true); err != nil || len(done.Deleted) != 1 {
		t.Fatalf("second GC: %+v %v", done, err)
	}
	// An orphan: uploaded, never registered, past the grace period.
	e.upload(t, "parts/orphan")
	short := *e.cfg
	short.S3.OrphanGrace = time.Millisecond // S3 keeps whole seconds: the upload is older at once
	sc := e.catalog(t, &short)
	rep, err := sc.Audit(ctx(t))
	if err != nil || len(rep.Findings) != 1 || rep.Findings[0].Kind != objects.Orphan {
		t.Fatalf("audit of an orphan: %+v %v", rep, err)
	}
	if done, err := sc.GC(ctx(t), true); err != nil || len(done.Orphans) != 1 || e.inBucket(t, "parts/orphan") {
		t.Fatalf("orphan GC: %+v %v", done, err)
	}
	clean(t, sc)
}

// TestCatalogNemesis runs clients linking, unlinking and moving the same
// objects across 3 shards of 3 members while a nemesis kills and restarts
// leaders. Each client records its calls and their answers; afterwards
// the references each client's calls left must be what those calls
// explain (history.check), every other reference is the one registered
// before, every count equals the references that exist, no referenced
// object is missing, and the audit finds nothing. The seed is logged;
// XKEEPER_OBJECTS_SEED=N replays one.
func TestCatalogNemesis(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("XKEEPER_OBJECTS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (XKEEPER_OBJECTS_SEED=%d replays it)", seed, seed)
	e := start(t, 3, 3)
	c := e.catalog(t, nil)
	const objectsN, clients = 6, 4
	key := func(i int) string { return fmt.Sprintf("parts/o%d", i) }
	base := refSet{}
	for i := range objectsN {
		e.upload(t, key(i))
		r := ref(e.tables[i%len(e.tables)], "base", strconv.Itoa(i))
		require.NoError(t, c.Register(ctx(t), r, key(i)))
		base[r] = key(i)
	}
	// Each client has a part of its own in every table: no other client
	// touches its references.
	part := func(w int) string { return fmt.Sprintf("w%d", w) }
	catalogs := make([]*objects.Catalog, clients)
	for w := range catalogs {
		catalogs[w] = e.catalog(t, nil)
	}
	calls := make([][]histOp, clients) // each written by its client alone until wg.Wait
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				obj := rng.IntN(objectsN)
				src := ref(e.tables[obj%len(e.tables)], "base", strconv.Itoa(obj))
				from := rng.IntN(len(e.tables))
				dst := ref(e.tables[from], part(w), strconv.Itoa(i%5))
				// Long enough that a call outlives the nemesis's faults: most
				// answers are known, and those that are not are in doubt.
				octx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var o histOp
				switch rng.IntN(3) {
				case 0:
					o = histOp{kind: linkOp, ref: dst, key: key(obj)}
					o.err = catalogs[w].Link(octx, src, dst)
				case 1:
					o = histOp{kind: unlinkOp, ref: dst}
					o.err = catalogs[w].Unlink(octx, dst)
				case 2:
					to := rng.IntN(len(e.tables) - 1)
					if to >= from {
						to++
					}
					o = histOp{kind: moveOp, from: dst.Table, to: e.tables[to], part: dst.Part}
					o.moved, o.err = catalogs[w].Move(octx, o.from, o.to, o.part)
				}
				cancel()
				calls[w] = append(calls[w], o)
			}
		}()
	}
	nemesis := rand.New(rand.NewPCG(seed, 99))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		shard := e.cfg.Shards[nemesis.IntN(len(e.cfg.Shards))].Name
		leader := e.keepers.WaitLeader(shard)
		e.keepers.Kill(leader)
		// The fault's length and the calm after it, not waits for a condition.
		time.Sleep(time.Duration(300+nemesis.IntN(700)) * time.Millisecond)
		e.keepers.Restart(leader)
		e.keepers.WaitLeader(shard)
		time.Sleep(time.Duration(200+nemesis.IntN(800)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	// Every transaction left in doubt ends before the references are read.
	settled(t, e, time.Minute)
	rep := clean(t, c)
	t.Logf("after the nemesis: %d objects, %d references", rep.Objects, rep.References)
	got := map[string]refSet{} // by part
	for _, table := range e.tables {
		entries, err := c.Refs(ctx(t), table)
		require.NoError(t, err)
		for _, en := range entries {
			if got[en.Part] == nil {
				got[en.Part] = refSet{}
			}
			got[en.Part][ref(table, en.Part, en.File)] = en.Key
		}
	}
	assert.Equal(t, base.String(), got["base"].String(), "the references registered before are all there, unchanged")
	kinds := map[string]int{}
	for w, ops := range calls {
		h := newHistory(refSet{})
		for _, o := range ops {
			switch {
			case o.err == nil:
				kinds["done"]++
			case refused(o.err):
				kinds["refused"]++
			default:
				kinds["in doubt"]++
			}
			// The base references keep every object live, and the source
			// of a link is one of them.
			if errors.Is(o.err, objects.ErrDeletable) || errors.Is(o.err, objects.ErrUnknownObject) ||
				o.kind == linkOp && errors.Is(o.err, objects.ErrNoReference) {
				t.Errorf("client %d: %s", w, o)
			}
			if err := h.add(o); err != nil {
				t.Errorf("client %d: %v", w, err)
				h = nil
				break
			}
		}
		if h == nil {
			continue
		}
		assert.NoError(t, h.check(got[part(w)]), "client %d", w)
		t.Logf("client %d: %d calls, %d in doubt, at most %d explanations at once", w, len(ops), len(h.doubt), h.most)
	}
	t.Logf("answers: %v", kinds)
	mine := map[string]bool{"base": true}
	for w := range clients {
		mine[part(w)] = true
	}
	for p, refs := range got {
		assert.True(t, mine[p], "part %s: references no call made: %v", p, refs)
	}
	assert.GreaterOrEqual(t, kinds["done"], 10, "operations done")
	// Every count is the number of references found, independently of
	// the audit's count; every object stays live with its bytes.
	count := map[string]int64{}
	for _, refs := range got {
		for _, k := range refs {
			count[k]++
		}
	}
	objs, err := c.Objects(ctx(t))
	require.NoError(t, err)
	assert.Len(t, objs, objectsN)
	for _, o := range objs {
		assert.Equal(t, count[o.Key], o.Refs, "count of %s", o.Key)
		assert.Equal(t, objects.Live, o.State, "%s", o.Key)
	}
	for i := range objectsN {
		assert.True(t, e.inBucket(t, key(i)), "%s gone from S3", key(i))
	}
}

// TestCatalogCrashSteps stops the cross-shard transaction of a link, an
// unlink and a zero-copy move at every step of its two-phase commit, as a
// crash of the coordinating member would. Once the shards' own recovery
// has ended the transaction (every shard answers, with no transaction
// record left), the references must be what the calls explain
// (history.check: acknowledged ones applied, ones in doubt applied or
// not), every count equals the references that exist and the object is
// in S3.
func TestCatalogCrashSteps(t *testing.T) {
	var armed atomic.Value // the step to stop at, once
	armed.Store("")
	hook := func(step, id, shard string) error {
		if armed.CompareAndSwap(step, "") && step != "" {
			return errors.New("crash at " + step)
		}
		return nil
	}
	e := startWith(t, testenv.ClusterOptions{Shards: 2, Members: 1, XHook: hook})
	c := e.catalog(t, nil)
	t0, t1, t2 := e.tables[0], e.tables[1], e.tables[2] // shards a, b, a
	e.upload(t, "parts/c")
	src := ref(t0, "p", "f")
	require.NoError(t, c.Register(ctx(t), src, "parts/c"))
	// observe reads the references of the tables the calls touch.
	observe := func() refSet {
		got := refSet{}
		for _, table := range []movepart.TableRef{t0, t1, t2} {
			entries, err := c.Refs(ctx(t), table)
			require.NoError(t, err)
			for _, en := range entries {
				got[ref(table, en.Part, en.File)] = en.Key
			}
		}
		return got
	}
	h := newHistory(refSet{src: "parts/c"})
	// recovered waits for the shards' recovery to end every transaction,
	// then checks the references against the calls.
	recovered := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, perr := pending(t, e)
			rep, aerr := c.Audit(ctx(t))
			if perr == nil && n == 0 && aerr == nil && len(rep.Findings) == 0 {
				break
			}
			if time.Now().After(deadline) {
				recs, rerr := records(t, e)
				t.Fatalf("%s: %+v %v; %d pending (%v); records %+v %v", what, rep, aerr, n, perr, recs, rerr)
			}
			time.Sleep(50 * time.Millisecond) // polling the recovery, with a deadline
		}
		got := observe()
		require.NoError(t, h.check(got), what)
		h = newHistory(got) // what it is now is known
	}
	steps := []string{xshard.StepBeforePrepare, xshard.StepPrepared, xshard.StepAllPrepared, xshard.StepDecisionSent,
		xshard.StepBeforeCleanup, xshard.StepCleaned, xshard.StepBeforeOwnDelete}
	for i, step := range steps {
		q := "q" + strconv.Itoa(i)
		dst := ref(t1, q, "f")
		for _, op := range []string{"link", "move", "unlink"} {
			armed.Store(step)
			octx, cancel := context.WithTimeout(ctx(t), 3*time.Second)
			var calls []histOp
			switch op {
			case "link":
				o := histOp{kind: linkOp, ref: dst, key: "parts/c"}
				o.err = c.Link(octx, src, dst)
				calls = append(calls, o)
			case "move": // b → a and back: the second goes through
				o := histOp{kind: moveOp, from: t1, to: t2, part: q}
				o.moved, o.err = c.Move(octx, o.from, o.to, o.part)
				calls = append(calls, o)
				if o.err == nil {
					back := histOp{kind: moveOp, from: t2, to: t1, part: q}
					back.moved, back.err = c.Move(octx, back.from, back.to, back.part)
					calls = append(calls, back)
				}
			case "unlink":
				o := histOp{kind: unlinkOp, ref: dst}
				o.err = c.Unlink(octx, dst)
				calls = append(calls, o)
			}
			cancel()
			// Cleanup steps run after the answer: wait for the stop.
			for wait := time.Now().Add(10 * time.Second); armed.Load() != ""; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(wait) {
					t.Fatalf("%s never reached %s", op, step)
				}
			}
			for _, o := range calls {
				t.Logf("stopped at %s: %s", step, o)
				require.NoError(t, h.add(o))
			}
			recovered(fmt.Sprintf("after %s stopped at %s", op, step))
		}
		// Whatever happened, leave nothing linked for the next step.
		for _, r := range []objects.Ref{dst, ref(t2, q, "f")} {
			o := histOp{kind: unlinkOp, ref: r}
			o.err = c.Unlink(ctx(t), r)
			if o.err != nil && !errors.Is(o.err, objects.ErrNoReference) {
				t.Fatalf("%s", o)
			}
			require.NoError(t, h.add(o))
		}
		recovered("after the unlinks of " + q)
	}
	assert.True(t, e.inBucket(t, "parts/c"), "the object left S3")
	assert.Equal(t, refSet{src: "parts/c"}.String(), observe().String(), "the registered reference alone is left")
	objs, err := c.Objects(ctx(t))
	require.NoError(t, err)
	require.Len(t, objs, 1)
	assert.Equal(t, int64(1), objs[0].Refs)
	assert.Equal(t, objects.Live, objs[0].State)
}

// settled waits, until a deadline, for every shard to answer with no
// cross-shard transaction record left.
func settled(t *testing.T, e *env, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, err := pending(t, e)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions still in doubt after %v: %d records, %v", within, n, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the recovery, with a deadline
	}
}

// pending counts the cross-shard transaction records on every shard; a
// shard that does not answer is an error, not zero.
func pending(t *testing.T, e *env) (int, error) {
	recs, err := records(t, e)
	return len(recs), err
}

// records lists the cross-shard transaction records on every shard, or
// says which shard did not answer within a few seconds.
func records(t *testing.T, e *env) ([]proto.XRecord, error) {
	r := movetest.Router(t, e.cfg)
	defer r.Close() // a poll opens a router each time
	rctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	var out []proto.XRecord
	for _, sh := range e.cfg.Shards {
		var list proto.XListResponse
		if err := r.Do(rctx, sh.Name, proto.OpXList, proto.Empty{}, &list); err != nil {
			return out, fmt.Errorf("shard %s did not answer: %w", sh.Name, err)
		}
		out = append(out, list.Records...)
	}
	return out, nil
}

// TestRemoveIfMatch deletes through the S3 API only the bytes of the ETag
// given (the ETag GC listed): bytes uploaded again under the key stay.
func TestRemoveIfMatch(t *testing.T) {
	s3 := testenv.StartS3(t)
	b, err := objects.OpenS3(ctx(t), s3.Config)
	require.NoError(t, err)
	const key = "parts/a b+c/ü=1"
	put := func(data string) objects.ObjectInfo {
		_, err := s3.Client().PutObject(ctx(t), s3.Config.Bucket, key, strings.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
		require.NoError(t, err)
		info, err := b.Stat(ctx(t), key)
		require.NoError(t, err)
		return info
	}
	first, second := put("first"), put("second bytes")
	require.NotEqual(t, first.ETag, second.ETag)
	for info, err := range b.List(ctx(t), "parts/") {
		require.NoError(t, err)
		assert.Equal(t, second.ETag, info.ETag, "listed")
	}
	require.ErrorIs(t, b.Remove(ctx(t), key, first.ETag), objects.ErrChanged)
	_, err = b.Stat(ctx(t), key)
	require.NoError(t, err, "bytes of another ETag deleted")
	require.NoError(t, b.Remove(ctx(t), key, second.ETag))
	_, err = b.Stat(ctx(t), key)
	require.ErrorIs(t, err, objects.ErrUnknownObject)
	require.NoError(t, b.Remove(ctx(t), key, second.ETag), "a missing object")
	require.NoError(t, b.Remove(ctx(t), key, ""), "a missing object")
}
