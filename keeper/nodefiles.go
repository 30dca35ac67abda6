package keeper

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// NodeLogGroup is one group of a node's Raft log: whose entries it holds
// and which member data directory names it.
type NodeLogGroup struct {
	Group string `json:"group"`
	First uint64 `json:"first"` // its first entry's index; 0 with none
	Last  uint64 `json:"last"`  // its last entry's index; 0 with none
	// DataDir is the member data directory whose log the group is, ""
	// when none names it any more (the member moved off the node, or its
	// directory was made anew).
	DataDir string `json:"data_dir,omitempty"`
	// Dropped says that PruneNodeLog deleted its entries.
	Dropped bool `json:"dropped,omitempty"`
}

// PruneNodeLog lists the groups of the log of node name, which must be
// stopped, and with commit deletes the entries of each group that holds
// entries and that no member data directory names. The directories looked
// at are the subdirectories of the node's data directory (symbolic links
// followed) and the data directories of the members the cluster file
// places on the node; a member directory kept anywhere else is not seen,
// so its group would count as unnamed. Such entries would otherwise keep
// the log's segments, and their disk space, for ever.
//
// With commit it first requires that the data directory of every member
// the cluster file places on the node has chosen its log store: a
// directory missing (an unmounted disk, a wrong path) would otherwise let
// its member's entries be dropped. A group that a data directory names is
// never touched, even if the cluster file no longer places that member on
// the node: dropping it would leave the member, put back, on an empty log
// with its old term and vote.
func PruneNodeLog(c *config.Cluster, name string, commit bool, log *slog.Logger) ([]NodeLogGroup, error) {
	node, ids, dir, err := existingNodeLog(c, name)
	if err != nil {
		return nil, err
	}
	if commit {
		if err := membersHaveChosen(c, ids); err != nil {
			return nil, fmt.Errorf("keeper: node %s: nothing dropped: %w", name, err)
		}
	}
	l, err := nodelog.Open(dir, nodelog.Options{Fsync: true, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("keeper: node %s: open the node log (stop the node first): %w", name, err)
	}
	defer l.Close()
	dirs, err := memberDirs(c, node.DataDir, ids)
	if err != nil {
		return nil, err
	}
	named := map[string]string{} // group → the data directory naming it
	for _, d := range dirs {
		logID, group, err := replica.NodeLogGroup(d)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && group == "") {
			continue
		}
		if err != nil {
			return nil, err
		}
		if logID != l.ID() {
			// Kept, to be safe: the group names are new with each data
			// directory, so this is a directory copied from elsewhere.
			log.Warn("node log: a data directory names a group of another node log", "dir", d, "log", logID, "here", l.ID())
		}
		named[group] = d
	}
	out := []NodeLogGroup{}
	for _, g := range l.Groups() {
		entry := NodeLogGroup{Group: g.Name, First: g.First, Last: g.Last, DataDir: named[g.Name]}
		if entry.DataDir == "" && g.Last == 0 {
			continue // nothing of it left
		}
		if entry.DataDir == "" && commit {
			if err := l.Drop(g.Name); err != nil {
				return out, fmt.Errorf("keeper: node %s: drop group %s: %w", name, g.Name, err)
			}
			entry.Dropped = true
			log.Info("node log: dropped a group no member data directory names", "group", g.Name, "first", g.First, "last", g.Last)
		}
		out = append(out, entry)
	}
	return out, nil
}

// membersHaveChosen fails unless the data directory of each member in ids
// has chosen its log store.
func membersHaveChosen(c *config.Cluster, ids []string) error {
	var missing []string
	for _, id := range ids {
		_, m, err := c.Member(id)
		if err != nil {
			return err
		}
		if _, _, err := replica.NodeLogGroup(m.DataDir); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, fmt.Sprintf("%s (%s)", id, m.DataDir))
		} else if err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the data directory of %s is missing or was never started: mount it, "+
			"start the node once, or take the member out of the cluster file", strings.Join(missing, ", "))
	}
	return nil
}

// memberDirs lists the directories that may be a member's of the node:
// every subdirectory of its data directory (symbolic links followed), and
// the data directory of each member the cluster file places on it.
func memberDirs(c *config.Cluster, nodeDir string, ids []string) ([]string, error) {
	entries, err := os.ReadDir(nodeDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		if d = filepath.Clean(d); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, e := range entries {
		if e.Name() == nodeLogDir || e.Name() == "lost+found" {
			continue
		}
		d := filepath.Join(nodeDir, e.Name())
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			add(d)
		}
	}
	for _, id := range ids {
		_, m, err := c.Member(id)
		if err != nil {
			return nil, err
		}
		add(m.DataDir)
	}
	return dirs, nil
}

// MemberLog is where a member of a node keeps its Raft log.
type MemberLog struct {
	Member  string `json:"member"`
	DataDir string `json:"data_dir"`
	// Store is "wal" or "bolt" for a log of the member's own, "node" for
	// a node log, "" for a directory never started.
	Store string `json:"store"`
	// Own says that the node log is the member's own, in its data
	// directory (it ran alone with keeper.log_store: node).
	Own     bool   `json:"own,omitempty"`
	Entries uint64 `json:"entries,omitempty"` // in a log of its own
	// Moved says that AdoptMemberLogs moved the log into the node log.
	Moved bool `json:"moved,omitempty"`
}

// AdoptMemberLogs lists where each member of node name, which must be
// stopped, keeps its Raft log, and with commit moves each log a member
// keeps on its own (raft-wal, bolt, or a node log of its own: a data
// directory made before the node log, or as a member process) into the
// node log, so that one fdatasync serves all of them. A move is
// crash-safe (replica.MoveToNodeLog): run it again after a failure.
func AdoptMemberLogs(c *config.Cluster, name string, commit bool, log *slog.Logger) ([]MemberLog, error) {
	node, ids, err := c.Node(name)
	if err != nil {
		return nil, err
	}
	if commit && c.Keeper.LogStore != "" && c.Keeper.LogStore != replica.LogStoreNode {
		return nil, fmt.Errorf("keeper: keeper.log_store is %q, so moved members would refuse to start: "+
			"set it to %s, or remove it, first", c.Keeper.LogStore, replica.LogStoreNode)
	}
	dir := filepath.Join(node.DataDir, nodeLogDir)
	var nl *nodelog.Log
	logID := ""
	if commit {
		if nl, err = nodelog.Open(dir, nodelog.Options{Fsync: true, Logger: log}); err != nil {
			return nil, fmt.Errorf("keeper: node %s: open the node log (stop the node first): %w", name, err)
		}
		defer nl.Close()
		logID = nl.ID()
	} else if id, err := nodelog.ReadID(dir); err == nil {
		logID = id
	}
	out := []MemberLog{}
	for _, id := range ids {
		_, m, err := c.Member(id)
		if err != nil {
			return out, err
		}
		own, err := replica.ReadOwnLog(m.DataDir)
		if err != nil {
			return out, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		if own.Store == replica.LogStoreNode && own.LogID != logID && !own.Own {
			return out, fmt.Errorf("keeper: member %s keeps its Raft log in node log %s, not in node %s's: "+
				"it ran on another node; start it there", id, own.LogID, name)
		}
		ml := MemberLog{Member: id, DataDir: m.DataDir, Store: own.Store, Own: own.Own, Entries: own.Entries}
		if commit && own.Store != "" {
			moved, err := replica.MoveToNodeLog(m.DataDir, nl)
			if err != nil {
				return out, fmt.Errorf("keeper: member %s: move its log into the node log: %w", id, err)
			}
			if own.Store != replica.LogStoreNode || own.Own {
				ml.Moved, ml.Entries = true, moved
				log.Info("node log: moved a member's log into it", "member", id, "from", own.Store, "entries", moved)
			}
		}
		out = append(out, ml)
	}
	return out, nil
}

// NodeLogFailure is a failed write recorded in a node's Raft log
// (nodelog.FailedFile), which keeps the node from starting.
type NodeLogFailure struct {
	File    string `json:"file"`    // the record's path
	Note    string `json:"note"`    // what failed, as the log wrote it
	Cleared bool   `json:"cleared"` // ClearNodeLogFailure deleted it
}

// ClearNodeLogFailure lists the failed write recorded in the log of node
// name (none, or one) and with commit deletes the record, so that the
// node starts again; the node must be stopped. The operator runs it once
// the disk has been checked: what the failed write carried may read back
// from the page cache without being on disk, and Raft's checks on start
// (a member's last entry against its peers') are all that remain.
func ClearNodeLogFailure(c *config.Cluster, name string, commit bool, _ *slog.Logger) ([]NodeLogFailure, error) {
	_, _, dir, err := existingNodeLog(c, name)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, nodelog.FailedFile)
	note, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	failure := NodeLogFailure{File: file, Note: strings.TrimSpace(string(note))}
	if commit {
		if err := nodelog.ClearFailure(dir); err != nil {
			return nil, fmt.Errorf("keeper: node %s: clear the failed write (stop the node first): %w", name, err)
		}
		failure.Cleared = true
	}
	return []NodeLogFailure{failure}, nil
}

// existingNodeLog returns node name, the members it hosts and its log's
// directory, which must hold a node log.
func existingNodeLog(c *config.Cluster, name string) (*config.Node, []string, string, error) {
	node, ids, err := c.Node(name)
	if err != nil {
		return nil, nil, "", err
	}
	dir := filepath.Join(node.DataDir, nodeLogDir)
	if _, err := nodelog.ReadID(dir); err != nil {
		return nil, nil, "", fmt.Errorf("keeper: node %s has no node log in %s: %w", name, dir, err)
	}
	return node, ids, dir, nil
}
