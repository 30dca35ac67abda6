package testenv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/xkeeper/xkeeper/config"
)

// MemS3 is an S3 API served in this process (gofakes3, objects in
// memory): for tools and demos that need an S3 without installing one.
// Tests of the S3 catalog use StartS3, a real gateway.
type MemS3 struct {
	Config config.S3 // endpoint, bucket and credentials, as the cluster file holds them
	srv    *http.Server
}

// StartMemS3 serves an S3 API with one empty bucket on a free loopback
// port until Close.
func StartMemS3(bucket string) (*MemS3, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fake := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	m := &MemS3{
		Config: config.S3{Endpoint: ln.Addr().String(), Bucket: bucket, Prefix: "parts/",
			AccessKey: "xkeeper-demo", SecretKey: "xkeeper-demo-secret"},
		srv: &http.Server{Handler: fake.Server(), ReadHeaderTimeout: 10 * time.Second},
	}
	go m.srv.Serve(ln)
	return m, nil
}

// Close stops serving; the objects are gone.
func (m *MemS3) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
