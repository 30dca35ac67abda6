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
