package router

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xkeeper/xkeeper/config"
)

func TestTableRoutesByLongestMount(t *testing.T) {
	tb := NewTable("a", []config.Mount{{Path: "/ch/t1", Shard: "b"}, {Path: "/ch/t1/deep", Shard: "c"}, {Path: "/x", Shard: "c"}})
	for path, want := range map[string]string{
		"/": "a", "/zookeeper": "a", "/ch": "a", "/ch/t1": "b", "/ch/t1/r": "b", "/ch/t10": "a",
		"/ch/t1/deep": "c", "/ch/t1/deep/k": "c", "/ch/t1/deeper": "b", "/x": "c", "/xy": "a", "relative": "a", "": "a",
	} {
		assert.Equal(t, want, tb.Shard(path), path)
	}
	assert.True(t, tb.IsMountPoint("/ch/t1"))
	assert.False(t, tb.IsMountPoint("/ch/t1/r"))
	assert.Equal(t, "a", tb.Holder("/ch/t1"))
	assert.Equal(t, "b", tb.Holder("/ch/t1/deep"), "a mount inside a mount has its placeholder on the outer one")
	assert.ElementsMatch(t, []string{"a", "b", "c"}, tb.Shards())
	assert.Equal(t, map[string][]string{"b": {"/ch"}, "c": {"/ch", "/ch/t1"}}, tb.Scaffold())
	assert.Equal(t, []string{"/x", "/ch/t1", "/ch/t1/deep"}, tb.MountPoints())
}
