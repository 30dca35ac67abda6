package clickhouse

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Replica is one replica of a Replicated*MergeTree table as the table's
// keeper path records it (REPLICAS/NAME/host): where its server listens.
type Replica struct {
	Name    string
	Host    string // the server's interserver host
	TCPPort int    // the server's native port
	Active  bool   // the server holds the replica's is_active node
}

// Addr returns the replica's native address, host:port.
func (r Replica) Addr() string { return net.JoinHostPort(r.Host, strconv.Itoa(r.TCPPort)) }

// Replicas lists the replicas of t, a replicated table, by name, as its
// keeper path records them.
func (c *Conn) Replicas(ctx context.Context, t *Table) ([]Replica, error) {
	zk := strings.TrimSuffix(t.ZooKeeperPath, "/")
	names, err := c.zkChildren(ctx, zk+"/replicas")
	if err != nil {
		return nil, c.fail("list replicas of", tableName(t.Database, t.Name), "", "", err)
	}
	slices.Sort(names)
	out := make([]Replica, 0, len(names))
	for _, name := range names {
		r := Replica{Name: name}
		host, err := c.zkValue(ctx, zk+"/replicas/"+name, "host")
		if err != nil {
			return nil, c.fail("list replicas of", tableName(t.Database, t.Name), "", "", err)
		}
		for line := range strings.Lines(host) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
			switch k {
			case "host":
				r.Host = v
			case "tcp_port":
				r.TCPPort, _ = strconv.Atoi(v)
			}
		}
		children, err := c.zkChildren(ctx, zk+"/replicas/"+name)
		if err != nil {
			return nil, c.fail("list replicas of", tableName(t.Database, t.Name), "", "", err)
		}
		r.Active = slices.Contains(children, "is_active")
		out = append(out, r)
	}
	return out, nil
}

// KeeperParts returns, by replica, the parts of partition partitionID of t,
// a replicated table, that its keeper path records each replica holding:
// every part committed through any replica, whether or not the server
// asked has fetched it yet.
func (c *Conn) KeeperParts(ctx context.Context, t *Table, replicas []Replica, partitionID string) (map[string][]string, error) {
	zk := strings.TrimSuffix(t.ZooKeeperPath, "/")
	out := make(map[string][]string, len(replicas))
	for _, r := range replicas {
		names, err := c.zkChildren(ctx, zk+"/replicas/"+r.Name+"/parts")
		if err != nil {
			return nil, c.fail("list the keeper's parts of", tableName(t.Database, t.Name), partitionID, "", err)
		}
		for _, n := range names {
			if p, ok := ParsePartName(n, t.LegacySyntax); ok && p.Partition == partitionID {
				out[r.Name] = append(out[r.Name], n)
			}
		}
	}
	return out, nil
}

// PartName is a data part's name taken apart: its partition and the range
// of block numbers its rows were inserted under, with its merge level and
// mutation version.
type PartName struct {
	Name                string
	Partition           string
	Min, Max            int64
	Level, MutationsVer int64
}

// ParsePartName parses a part name: PARTITION_MIN_MAX_LEVEL[_MUTATION], or
// for a table of the legacy syntax MINDATE_MAXDATE_MIN_MAX_LEVEL[_MUTATION]
// (its partition is the month, YYYYMM).
func ParsePartName(name string, legacy bool) (PartName, bool) {
	f := strings.Split(name, "_")
	p := PartName{Name: name}
	nums := f[1:]
	p.Partition = f[0]
	if legacy {
		if len(f) < 2 || len(f[0]) != 8 {
			return p, false
		}
		p.Partition, nums = f[0][:6], f[2:]
	}
	if len(nums) != 3 && len(nums) != 4 {
		return p, false
	}
	v := make([]int64, 4)
	for i, s := range nums {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return p, false
		}
		v[i] = n
	}
	p.Min, p.Max, p.Level, p.MutationsVer = v[0], v[1], v[2], v[3]
	return p, p.Min <= p.Max
}

// PartPrefix returns what the name of every part of partition partitionID
// starts with (and no other partition's): "ID_", or for a table of the
// legacy syntax the month, as in "202401".
func PartPrefix(partitionID string, legacy bool) string {
	if legacy {
		return partitionID
	}
	return partitionID + "_"
}

// covers reports whether part a holds every row of part b (a merge or
// mutation of b and maybe others made a).
func (a PartName) covers(b PartName) bool {
	return a.Name != b.Name && a.Partition == b.Partition && a.Min <= b.Min && b.Max <= a.Max &&
		a.Level >= b.Level && a.MutationsVer >= b.MutationsVer
}

// MergedFrom reports whether parts now hold the rows of parts then as
// merges alone leave them: every part of now is one of then or a merge of
// some of them (its block range exactly theirs, no mutation newer than
// theirs) and every part of then is inside one of now. An insert, an
// attach or a REPLACE takes new block numbers, a mutation a new version
// and a drop or detach leaves a part of then uncovered: each makes it
// false, as does a name it cannot parse.
func MergedFrom(now, then []Part, legacy bool) bool {
	old := make([]PartName, 0, len(then))
	for _, p := range then {
		n, ok := ParsePartName(p.Name, legacy)
		if !ok {
			return false
		}
		old = append(old, n)
	}
	inside := 0
	for _, p := range now {
		n, ok := ParsePartName(p.Name, legacy)
		if !ok {
			return false
		}
		lo, hi, ver, found := n.Max+1, n.Min-1, int64(0), 0
		for _, o := range old {
			switch {
			case o.Partition != n.Partition || o.Max < n.Min || o.Min > n.Max:
				continue
			case o.Min < n.Min || o.Max > n.Max:
				return false // overlaps n without being inside it
			}
			lo, hi, ver, found = min(lo, o.Min), max(hi, o.Max), max(ver, o.MutationsVer), found+1
		}
		if found == 0 || lo != n.Min || hi != n.Max || n.MutationsVer > ver {
			return false
		}
		inside += found
	}
	return inside == len(old)
}

// Outermost returns the names of the parts no other part of names covers,
// sorted: what a replica holding all of them keeps active once its merges
// and fetches are done (the keeper keeps a merged part's sources for a while).
func Outermost(names []string, legacy bool) []string {
	parsed := make([]PartName, 0, len(names))
	for _, n := range names {
		if p, ok := ParsePartName(n, legacy); ok {
			parsed = append(parsed, p)
		}
	}
	var out []string
	for _, b := range parsed {
		if !slices.ContainsFunc(parsed, func(a PartName) bool { return a.covers(b) }) && !slices.Contains(out, b.Name) {
			out = append(out, b.Name)
		}
	}
	slices.Sort(out)
	return out
}
