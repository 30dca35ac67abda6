package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Write validates c and writes it as YAML to path, replacing the file
// atomically; Load reads back a Cluster equal to c. Every keeper key is
// written, so the file shows the tunables in force.
func (c *Cluster) Write(path string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		return err
	}
	if err := writeFileAtomic(path, buf.Bytes(), c.fileMode()); err != nil {
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	return nil
}

// Encode writes c as YAML, in the cluster file's form.
func (c *Cluster) Encode(w io.Writer) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("config: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("config: encode: %w", err)
	}
	return nil
}

// fileMode is the mode of c's cluster file: readable by its owner alone
// when it holds a secret (one that Masked hides), else by everyone.
func (c *Cluster) fileMode() os.FileMode {
	if c.Masked().encoded() != c.encoded() {
		return 0o600
	}
	return 0o644
}

// encoded returns c as Encode writes it ("" if it cannot be encoded).
func (c *Cluster) encoded() string {
	var buf bytes.Buffer
	if c.Encode(&buf) != nil {
		return ""
	}
	return buf.String()
}

// Masked is what replaces a secret in Cluster.Masked.
const Masked = "<masked>"

// Masked returns a copy of c with its secrets replaced by Masked: the
// cluster secret, the password of security.auth, the hash of
// security.super_digest (a SHA-1 of the super password, open to a
// dictionary attack), the S3 secret key and the ClickHouse passwords. It is
// for showing a configuration.
func (c *Cluster) Masked() *Cluster {
	m := *c
	mask := func(s *string) {
		if *s != "" {
			*s = Masked
		}
	}
	mask(&m.Security.ClusterSecret)
	for _, id := range []*string{&m.Security.Auth, &m.Security.SuperDigest} {
		if user, _, ok := strings.Cut(*id, ":"); ok {
			*id = user + ":" + Masked
		}
	}
	mask(&m.S3.SecretKey)
	m.ClickHouse.Servers = slices.Clone(c.ClickHouse.Servers)
	for i := range m.ClickHouse.Servers {
		mask(&m.ClickHouse.Servers[i].Password)
	}
	return &m
}

// writeFileAtomic writes data to a temporary file beside path, syncs it and
// renames it over path, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
