package router

import (
	"slices"
	"strings"

	"github.com/xkeeper/xkeeper/config"
)

// Table is the mount table: which shard holds a path.
type Table struct {
	root   string
	mounts []config.Mount // longest path first
}

// NewTable returns the table placing each mount's subtree on its shard and
// every other path on root.
func NewTable(root string, mounts []config.Mount) *Table {
	t := &Table{root: root, mounts: slices.Clone(mounts)}
	slices.SortStableFunc(t.mounts, func(a, b config.Mount) int { return len(b.Path) - len(a.Path) })
	return t
}

// Root returns the root shard's name.
func (t *Table) Root() string { return t.root }

// Shard returns the shard that holds path: the one of the longest mount
// point at or above it, else the root shard. A path that is not absolute
// goes to the root shard, which refuses it as ZooKeeper would.
func (t *Table) Shard(path string) string {
	for _, m := range t.mounts {
		if under(path, m.Path) {
			return m.Shard
		}
	}
	return t.root
}

// IsMountPoint reports whether path is a mount point.
func (t *Table) IsMountPoint(path string) bool {
	return slices.ContainsFunc(t.mounts, func(m config.Mount) bool { return m.Path == path })
}

// Shards returns the root shard and every mounted shard, each once.
func (t *Table) Shards() []string {
	shards := []string{t.root}
	for _, m := range t.mounts {
		if !slices.Contains(shards, m.Shard) {
			shards = append(shards, m.Shard)
		}
	}
	return shards
}

// Holder returns the shard that holds a mount point's parent, where the
// mount point has a placeholder while it exists, so that getChildren of
// the parent lists it.
func (t *Table) Holder(mountPoint string) string { return t.Shard(parent(mountPoint)) }

// Scaffold lists, per shard, the znodes that must exist on it for the
// mount points to be created: on each mount's shard, the mount point's
// ancestors, parents first. (The mount points themselves are the
// clients' to create, as a ClickHouse table creates its path.)
func (t *Table) Scaffold() map[string][]string {
	out := map[string][]string{}
	for _, m := range slices.Backward(t.mounts) { // shortest first
		chain := ancestry(m.Path)
		for _, p := range chain[:len(chain)-1] {
			if !slices.Contains(out[m.Shard], p) {
				out[m.Shard] = append(out[m.Shard], p)
			}
		}
	}
	return out
}

// MountPoints returns the mount points, shortest first.
func (t *Table) MountPoints() []string {
	var paths []string
	for _, m := range slices.Backward(t.mounts) {
		paths = append(paths, m.Path)
	}
	return paths
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// parent returns the parent of an absolute path other than /.
func parent(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// ancestry returns /a, /a/b, … path: every ancestor below / and path.
func ancestry(path string) []string {
	var chain []string
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			chain = append(chain, path[:i])
		}
	}
	return append(chain, path)
}
