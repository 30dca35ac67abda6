package clickhouse

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParsePartName(t *testing.T) {
	p, ok := ParsePartName("202401_3_7_2_9", false)
	assert.True(t, ok)
	assert.Equal(t, PartName{Name: "202401_3_7_2_9", Partition: "202401", Min: 3, Max: 7, Level: 2, MutationsVer: 9}, p)
	p, ok = ParsePartName("20240101_20240131_3_7_2", true)
	assert.True(t, ok)
	assert.Equal(t, PartName{Name: "20240101_20240131_3_7_2", Partition: "202401", Min: 3, Max: 7, Level: 2}, p)
	for _, bad := range []string{"", "202401", "202401_a_1_0", "202401_5_1_0", "202401_1_1_0_1_1"} {
		_, ok := ParsePartName(bad, false)
		assert.False(t, ok, bad)
	}
	assert.Equal(t, "202401_", PartPrefix("202401", false))
	assert.Equal(t, "202401", PartPrefix("202401", true))
}

// TestOutermost: the keeper keeps a merged part's sources for a while;
// what a replica holding everything keeps active is the parts nothing
// covers.
func TestOutermost(t *testing.T) {
	assert.Equal(t, []string{"202401_1_3_1", "202401_4_4_0"},
		Outermost([]string{"202401_1_1_0", "202401_2_2_0", "202401_1_3_1", "202401_3_3_0", "202401_4_4_0", "202401_4_4_0"}, false))
	assert.Equal(t, []string{"202401_1_1_0_5"}, Outermost([]string{"202401_1_1_0", "202401_1_1_0_5"}, false), "a mutation covers its source")
	assert.Equal(t, []string{"202401_1_1_0", "202402_1_1_0"}, Outermost([]string{"202402_1_1_0", "202401_1_1_0"}, false), "partitions apart")
}

func TestMergesChangeRows(t *testing.T) {
	for engine, want := range map[string]bool{"MergeTree": false, "ReplicatedMergeTree": false, "ReplacingMergeTree": true,
		"ReplicatedCollapsingMergeTree": true, "SummingMergeTree": true, "Memory": false} {
		assert.Equal(t, want, (&Table{Engine: engine}).MergesChangeRows(), engine)
	}
}

// TestMergedFrom tells merges, which keep a partition's content, from
// everything else that changes its parts.
func TestMergedFrom(t *testing.T) {
	parts := func(names ...string) []Part {
		out := make([]Part, len(names))
		for i, n := range names {
			out[i] = Part{Name: n}
		}
		return out
	}
	then := parts("202401_1_1_0", "202401_3_3_0", "202401_4_6_1")
	for _, c := range []struct {
		name string
		now  []Part
		want bool
	}{
		{"Unchanged", then, true},
		{"AllMerged", parts("202401_1_6_2"), true},
		{"SomeMerged", parts("202401_1_3_1", "202401_4_6_1"), true},
		{"OneRemerged", parts("202401_1_1_1", "202401_3_3_0", "202401_4_6_2"), true},
		{"Inserted", parts("202401_1_1_0", "202401_3_3_0", "202401_4_6_1", "202401_7_7_0"), false},
		{"InsertedAndMerged", parts("202401_1_7_2"), false},
		{"Dropped", parts("202401_1_1_0", "202401_4_6_1"), false},
		{"Empty", nil, false},
		{"Mutated", parts("202401_1_1_0_7", "202401_3_3_0_7", "202401_4_6_1_7"), false},
		{"Replaced", parts("202401_8_8_0", "202401_9_9_0"), false},
		{"SplitAcross", parts("202401_1_4_1", "202401_5_6_1"), false},
		{"OtherPartition", parts("202402_1_1_0", "202401_3_3_0", "202401_4_6_1"), false},
		{"Unparsable", parts("all"), false},
	} {
		assert.Equal(t, c.want, MergedFrom(c.now, then, false), c.name)
	}
	assert.True(t, MergedFrom(parts("202401_1_2_1_5"), parts("202401_1_1_0_5", "202401_2_2_0"), false), "a merge keeps its sources' mutation")
	assert.True(t, MergedFrom(parts("20240101_20240131_1_2_1"), parts("20240101_20240115_1_1_0", "20240116_20240131_2_2_0"), true), "legacy syntax")
}
