package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xkeeper/xkeeper/config"
)

// RequireS3Env names the variable that makes a missing S3 server (versitygw
// failing to build or start) fail tests instead of skipping them.
const RequireS3Env = "XKEEPER_REQUIRE_S3"

// versitygwModule is the S3 gateway the tests run, built from the Go
// module proxy; its posix backend keeps objects as files.
const versitygwModule = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"

var (
	vgwOnce sync.Once
	vgwBin  string
	vgwErr  error
)

// versitygw builds the gateway once per test binary (go install into a
// temporary directory; the module cache makes later builds quick).
func versitygw() (string, error) {
	vgwOnce.Do(func() {
		dir, err := os.MkdirTemp("", "versitygw-")
		if err != nil {
			vgwErr = err
			return
		}
		cmd := exec.Command("go", "install", versitygwModule)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			vgwErr = fmt.Errorf("go install %s: %v\n%s", versitygwModule, err, out)
			return
		}
		vgwBin = filepath.Join(dir, "versitygw")
	})
	return vgwBin, vgwErr
}

// S3 is a real S3 API on loopback: versitygw with its posix backend, one
// bucket, stopped when the test ends.
type S3 struct {
	Config config.S3 // endpoint, bucket and credentials, as the cluster file holds them
	dir    string
	proc   *Process
	port   int
	bin    string
	t      testing.TB
}

// StartS3 builds and starts versitygw on a free port with its own data
// directory and creates bucket "xkeeper". The test is skipped when the
// gateway cannot be built, unless XKEEPER_REQUIRE_S3=1.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin, err := versitygw()
	if err != nil {
		skipOrFail(t, RequireS3Env, "S3 unavailable: %v", err)
	}
	s := &S3{t: t, bin: bin, dir: t.TempDir(), port: FreePort(t)}
	s.Config = config.S3{Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Bucket: "xkeeper",
		AccessKey: "xkeeper-test", SecretKey: "xkeeper-test-secret", Prefix: "parts/"}
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, s.Config.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("StartS3: make bucket: %v", err)
	}
	return s
}

func (s *S3) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, "--access", s.Config.AccessKey, "--secret", s.Config.SecretKey,
		"--port", s.Config.Endpoint, "posix", filepath.Join(s.dir, "data"))
	p, err := StartProcess(s.t, cmd, filepath.Join(s.dir, "versitygw.log"))
	if err != nil {
		s.t.Fatalf("StartS3: %v", err)
	}
	s.proc = p
	err = p.WaitReady(30*time.Second, func(ctx context.Context) error {
		_, err := s.Client().ListBuckets(ctx)
		return err
	})
	if err != nil {
		s.t.Fatalf("StartS3: versitygw not ready: %v\n%s", err, p.LogTail(20))
	}
}

// Client returns a minio client for the gateway.
func (s *S3) Client() *minio.Client {
	c, err := minio.New(s.Config.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.Config.AccessKey, s.Config.SecretKey, "")})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// Stop kills the gateway (the bucket becomes unreachable); Start brings it back.
func (s *S3) Stop() { s.proc.Kill() }

// Start restarts a stopped gateway on the same port and data.
func (s *S3) Start() { s.start() }
