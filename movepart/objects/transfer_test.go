package objects_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestRoundTrip exports a partition from one ClickHouse 18.16 server into
// the bucket, moves it zero-copy in the catalog to a table on another
// shard, and imports it into that table on another server: the same rows,
// exactly once. With no crash injected every call succeeds the first time;
// an export or import stopped at any of its steps is run again, and that
// run must succeed and answer what the catalog holds.
func TestRoundTrip(t *testing.T) {
	e := movetest.Start(t)
	s3 := testenv.StartS3(t)
	e.Config.S3 = s3.Config
	r := movetest.Router(t, e.Config)
	b, err := objects.OpenS3(movetest.Ctx(t), e.Config.S3)
	require.NoError(t, err)
	a, bconn := e.Conn(t, "ca"), e.Conn(t, "cb")
	for i, crashAt := range []string{"", objects.StepExportFrozen, objects.StepExportUploaded, objects.StepExportCleaned,
		objects.StepImportFetched, objects.StepImportAttached} {
		name := crashAt
		if name == "" {
			name = "no-crash"
		}
		t.Run(name, func(t *testing.T) {
			db := fmt.Sprintf("rt%d", i)
			src := e.NewTable(t, "ca:"+db+".src", false, 3000, i+1)
			src.Insert(t, "2024-01-01", 500, i+7) // a second part
			dst := e.NewTable(t, "cb:"+db+".dst", false, 0, i+2)
			want := e.Fingerprint(t, src.Ref, movetest.Partition)
			c := objects.New(r, b, testenv.TestLogger(t))
			crashed := false
			c.Point = func(step string) {
				if step == crashAt && !crashed {
					crashed = true
					panic(step)
				}
			}
			// run runs a call. One whose steps include crashAt must stop
			// there, and is run once more, as an operator would; any other
			// must succeed the first time.
			run := func(what string, steps []string, f func() error) {
				t.Helper()
				var stopped any
				err := func() error {
					defer func() { stopped = recover() }()
					return f()
				}()
				if !slices.Contains(steps, crashAt) {
					require.Nil(t, stopped, "%s crashed with no crash injected in it", what)
					require.NoError(t, err, "%s, with no crash injected in it", what)
					return
				}
				require.Equal(t, crashAt, stopped, "%s stops at %s (error %v)", what, crashAt, err)
				require.NoError(t, f(), "%s run again after the crash at %s", what, crashAt)
			}
			var files []objects.Entry
			run("export", []string{objects.StepExportFrozen, objects.StepExportUploaded, objects.StepExportCleaned}, func() (err error) {
				files, err = c.Export(movetest.Ctx(t), a, src.Ref, movetest.Partition)
				return err
			})
			// The files the (last) export answered are those the catalog
			// holds for the source, each in the bucket, in both parts.
			registered, err := c.Refs(movetest.Ctx(t), src.Ref)
			require.NoError(t, err)
			assert.ElementsMatch(t, registered, files, "the export's answer against the catalog")
			require.Equal(t, 2, partsOf(files), "files of both parts exported: %v", files)
			for _, f := range files {
				_, err := b.Stat(movetest.Ctx(t), f.Key)
				assert.NoError(t, err, "%s/%s", f.Part, f.File)
			}
			n, err := c.MovePartition(movetest.Ctx(t), src.Ref, dst.Ref, movetest.Partition)
			require.NoError(t, err, "zero-copy move")
			require.Equal(t, len(files), n, "zero-copy move")
			var imported []string
			run("import", []string{objects.StepImportFetched, objects.StepImportAttached}, func() (err error) {
				imported, err = c.Import(movetest.Ctx(t), bconn, dst.Ref, movetest.Partition)
				return err
			})
			if crashAt != "" && !crashed {
				t.Fatalf("never reached %s", crashAt)
			}
			// The (last) import answers every part the catalog holds for
			// the destination, by its name there.
			moved, err := c.Refs(movetest.Ctx(t), dst.Ref)
			require.NoError(t, err)
			var names []string
			for _, en := range moved {
				if !slices.Contains(names, en.Part) {
					names = append(names, en.Part)
				}
			}
			assert.Equal(t, names, imported, "the import's answer")
			if got := e.Fingerprint(t, dst.Ref, movetest.Partition); got != want {
				t.Errorf("imported partition %+v, want %+v", got, want)
			}
			parts, err := bconn.Parts(movetest.Ctx(t), dst.Ref.Database, dst.Ref.Table, movetest.Partition)
			if err != nil || len(parts) != 2 {
				t.Errorf("destination parts %v %v, want the 2 imported", parts, err)
			}
			if got := e.Fingerprint(t, src.Ref, movetest.Partition); got != want {
				t.Errorf("source changed by the export: %+v", got)
			}
			// Run again after success (an operator who did not see the
			// answer): nothing more is imported or registered.
			if parts, err := c.Import(movetest.Ctx(t), bconn, dst.Ref, movetest.Partition); err != nil || len(parts) != 2 {
				t.Errorf("import again: %v %v", parts, err)
			}
			if got := e.Fingerprint(t, dst.Ref, movetest.Partition); got != want {
				t.Errorf("a second import changed the destination: %+v, want %+v", got, want)
			}
			rep, err := c.Audit(movetest.Ctx(t))
			if err != nil || len(rep.Findings) != 0 {
				t.Errorf("catalog audit: %+v %v", rep, err)
			}
		})
	}
	// The same through the xkeeper command, killed (SIGKILL) at a step of
	// the export and of the import, then run again.
	t.Run("command", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "cluster.yaml")
		if err := e.Config.Write(cfg); err != nil {
			t.Fatal(err)
		}
		src := e.NewTable(t, "ca:rtc.src", false, 2000, 5)
		dst := e.NewTable(t, "cb:rtc.dst", false, 0, 6)
		want := e.Fingerprint(t, src.Ref, movetest.Partition)
		run := func(failPoint string, args ...string) (string, bool) {
			cmd := exec.Command(testenv.XkeeperBinary(t), append([]string{"--config", cfg}, args...)...)
			cmd.Env = append(os.Environ(), "XKEEPER_FAILPOINT="+failPoint)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			killed := errors.As(err, &exit) && exit.ProcessState.Sys().(syscall.WaitStatus).Signaled()
			if err != nil && !killed {
				t.Fatalf("xkeeper %v: %v\n%s", args, err, out)
			}
			return string(out), killed
		}
		export := []string{"partition", "export", "--from", src.Ref.String(), "--partition", movetest.Partition}
		imp := []string{"partition", "import", "--to", dst.Ref.String(), "--partition", movetest.Partition}
		if _, killed := run(objects.StepExportUploaded, export...); !killed {
			t.Fatal("export not killed at its fail point")
		}
		if out, _ := run("", export...); !strings.Contains(out, "files registered") {
			t.Fatalf("export again: %s", out)
		}
		if out, _ := run("", "partition", "move", "--zero-copy", "--from", src.Ref.String(), "--to", dst.Ref.String(), "--partition", movetest.Partition); !strings.Contains(out, "zero-copy move done") {
			t.Fatalf("zero-copy move: %s", out)
		}
		if _, killed := run(objects.StepImportAttached, imp...); !killed {
			t.Fatal("import not killed at its fail point")
		}
		if out, _ := run("", imp...); !strings.Contains(out, "attached") {
			t.Fatalf("import again: %s", out)
		}
		if got := e.Fingerprint(t, dst.Ref, movetest.Partition); got != want {
			t.Errorf("imported partition %+v, want %+v", got, want)
		}
		if out, _ := run("", "s3", "audit"); !strings.Contains(out, "0 deletable") {
			t.Errorf("s3 audit: %s", out)
		}
	})
}

// partsOf counts the parts entries belong to.
func partsOf(entries []objects.Entry) int {
	parts := map[string]bool{}
	for _, en := range entries {
		parts[en.Part] = true
	}
	return len(parts)
}
