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
	if err := writeFileAtomic(path, buf.Bytes()); err != nil {
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

// Masked is what replaces a secret in Cluster.Masked.
const Masked = "<masked>"

// Masked returns a copy of c with its secrets replaced by Masked: the
// cluster secret, the password of security.auth, the S3 secret key and
// the ClickHouse passwords. It is for showing a configuration.
func (c *Cluster) Masked() *Cluster {
	m := *c
	mask := func(s *string) {
		if *s != "" {
			*s = Masked
		}
	}
	mask(&m.Security.ClusterSecret)
	if user, _, ok := strings.Cut(m.Security.Auth, ":"); ok {
		m.Security.Auth = user + ":" + Masked
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
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
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
