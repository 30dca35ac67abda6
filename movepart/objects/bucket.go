package objects

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xkeeper/xkeeper/config"
)

// ObjectInfo is what the bucket says of one object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Bucket is the S3 bucket the catalog's objects live in.
type Bucket interface {
	// Stat returns an object's info; ErrUnknownObject if it does not exist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Remove deletes an object; removing a missing object succeeds.
	Remove(ctx context.Context, key string) error
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
	b := &S3{c: c, bucket: s.Bucket, where: s.Endpoint + "/" + s.Bucket}
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
	return ObjectInfo{Key: key, Size: info.Size, Modified: info.LastModified}, nil
}

// Remove implements Bucket.
func (b *S3) Remove(ctx context.Context, key string) error {
	if err := b.c.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{}); err != nil &&
		minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return fmt.Errorf("objects: s3 %s: remove %s: %w", b.where, key, err)
	}
	return nil
}

// List implements Bucket.
func (b *S3) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				yield(ObjectInfo{}, fmt.Errorf("objects: s3 %s: list %s: %w", b.where, prefix, o.Err))
				return
			}
			if !yield(ObjectInfo{Key: o.Key, Size: o.Size, Modified: o.LastModified}, nil) {
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
