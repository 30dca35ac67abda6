package objects

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/xkeeper/xkeeper/config"
)

// ObjectInfo is what the bucket says of one object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
	ETag     string // of the bytes: a delete can be conditional on it
}

// Bucket is the S3 bucket the catalog's objects live in.
type Bucket interface {
	// Stat returns an object's info; ErrUnknownObject if it does not exist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Remove deletes an object; removing a missing object succeeds. With
	// an etag, only the bytes of that ETag: other bytes are ErrChanged.
	Remove(ctx context.Context, key, etag string) error
	// List yields every object whose key starts with prefix.
	List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error]
	// Upload puts the local file at path under key (again: replaced).
	Upload(ctx context.Context, key, path string) error
	// Download writes object key to the local file at path.
	Download(ctx context.Context, key, path string) error
}

// S3 is a Bucket on an S3 API, through minio-go.
type S3 struct {
	c      *minio.Client
	bucket string
	region string
	where  string
}

// OpenS3 connects to the cluster file's bucket and checks that it exists
// and that the credentials are accepted.
func OpenS3(ctx context.Context, s config.S3) (*S3, error) {
	if s.Endpoint == "" {
		return nil, errors.New("objects: the cluster file has no s3 section")
	}
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: s.Secure,
		Region: s.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("objects: s3 %s: %w", s.Endpoint, err)
	}
	b := &S3{c: c, bucket: s.Bucket, region: cmp.Or(s.Region, "us-east-1"), where: s.Endpoint + "/" + s.Bucket}
	ok, err := c.BucketExists(ctx, s.Bucket)
	switch {
	case err != nil:
		return nil, fmt.Errorf("objects: s3 %s: %w", b.where, err)
	case !ok:
		return nil, fmt.Errorf("objects: s3 %s: no such bucket", b.where)
	}
	return b, nil
}

// Client returns the minio client (uploads, downloads).
func (b *S3) Client() *minio.Client { return b.c }

// Name returns the bucket's name.
func (b *S3) Name() string { return b.bucket }

// Stat implements Bucket.
func (b *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := b.c.StatObject(ctx, b.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" || minio.ToErrorResponse(err).StatusCode == 404 {
			return ObjectInfo{}, fmt.Errorf("%w: %s not in s3 %s", ErrUnknownObject, key, b.where)
		}
		return ObjectInfo{}, fmt.Errorf("objects: s3 %s: stat %s: %w", b.where, key, err)
	}
	return ObjectInfo{Key: key, Size: info.Size, Modified: info.LastModified, ETag: info.ETag}, nil
}

// Remove implements Bucket. A conditional delete sends If-Match, which
// minio-go cannot: an S3 API that ignores it deletes whatever the ETag
// (the catalog's tombstones keep such a delete harmless).
func (b *S3) Remove(ctx context.Context, key, etag string) error {
	var err error
	if etag == "" {
		err = b.c.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{})
	} else {
		err = b.removeIf(ctx, key, etag)
	}
	switch {
	case err == nil || errors.Is(err, ErrChanged):
		return err
	case minio.ToErrorResponse(err).Code == "NoSuchKey":
		return nil
	}
	return fmt.Errorf("objects: s3 %s: remove %s: %w", b.where, key, err)
}

// removeIf sends DELETE key with If-Match: etag, signed as minio-go signs.
func (b *S3) removeIf(ctx context.Context, key, etag string) error {
	u := *b.c.EndpointURL()
	u.Path = "/" + b.bucket + "/" + key
	u.RawPath = "/" + b.bucket + "/" + s3utils.EncodePath(key)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.String(), nil)
	if err != nil {
		return err
	}
	creds, err := b.c.GetCreds()
	if err != nil {
		return err
	}
	req.Header.Set("If-Match", `"`+etag+`"`)
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	resp, err := http.DefaultClient.Do(signer.SignV4(*req, creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken, b.region))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK, http.StatusNotFound:
		return nil
	case http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %s is no longer %s", ErrChanged, key, etag)
	}
	return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
}

// emptySHA256 is the SHA-256 of an empty payload, as S3 signatures want it.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// List implements Bucket.
func (b *S3) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				yield(ObjectInfo{}, fmt.Errorf("objects: s3 %s: list %s: %w", b.where, prefix, o.Err))
				return
			}
			if !yield(ObjectInfo{Key: o.Key, Size: o.Size, Modified: o.LastModified, ETag: o.ETag}, nil) {
				return
			}
		}
	}
}

// Upload implements Bucket.
func (b *S3) Upload(ctx context.Context, key, path string) error {
	if _, err := b.c.FPutObject(ctx, b.bucket, key, path, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("objects: s3 %s: upload %s as %s: %w", b.where, path, key, err)
	}
	return nil
}

// Download implements Bucket.
func (b *S3) Download(ctx context.Context, key, path string) error {
	if err := b.c.FGetObject(ctx, b.bucket, key, path, minio.GetObjectOptions{}); err != nil {
		return fmt.Errorf("objects: s3 %s: download %s to %s: %w", b.where, key, path, err)
	}
	return nil
}
