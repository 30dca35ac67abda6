package clickhouse

import (
	"slices"
	"testing"
)

func TestParseEngine(t *testing.T) {
	tests := []struct {
		full        string
		replicated  bool
		legacy      bool
		granularity uint64
		plain       string
	}{
		{"MergeTree PARTITION BY toYYYYMM(d) ORDER BY k SETTINGS index_granularity = 8192",
			false, false, 8192, "MergeTree PARTITION BY toYYYYMM(d) ORDER BY k SETTINGS index_granularity = 8192"},
		{"ReplicatedMergeTree('/clickhouse/tables/{shard}/t', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY (k, v) SETTINGS index_granularity = 256",
			true, false, 256, "MergeTree PARTITION BY toYYYYMM(d) ORDER BY (k, v) SETTINGS index_granularity = 256"},
		{"ReplicatedReplacingMergeTree('/p/t', 'r1', ver) PARTITION BY d ORDER BY k",
			true, false, 8192, "MergeTree PARTITION BY d ORDER BY k"},
		{"SummingMergeTree((a, b)) ORDER BY tuple() SETTINGS index_granularity = 100",
			false, false, 100, "MergeTree ORDER BY tuple() SETTINGS index_granularity = 100"},
		{"MergeTree(d, k, 8192)", false, true, 8192, "MergeTree(d, k, 8192)"},
		{"MergeTree(d, intHash32(k), (k, intHash32(k)), 4096)", false, true, 4096, "MergeTree(d, intHash32(k), (k, intHash32(k)), 4096)"},
		{"ReplicatedCollapsingMergeTree('/p/a,b', 'r''1', d, (k, d), 512, sign)", true, true, 512, "MergeTree(d, (k, d), 512)"},
		{"ReplicatedSummingMergeTree('/p', 'r', d, k, 1024, (x, y))", true, true, 1024, "MergeTree(d, k, 1024)"},
	}
	for _, tt := range tests {
		e, err := parseEngine(tt.full)
		if err != nil {
			t.Errorf("parseEngine(%q): %v", tt.full, err)
			continue
		}
		if e.replicated != tt.replicated || e.legacy != tt.legacy || e.granularity != tt.granularity {
			t.Errorf("parseEngine(%q) = %+v", tt.full, e)
		}
		if got := e.plainMergeTree(); got != tt.plain {
			t.Errorf("plainMergeTree of %q = %q, want %q", tt.full, got, tt.plain)
		}
	}
	for _, bad := range []string{"Memory", "Distributed(c, db, t)", "MergeTree(d, k", "ReplicatedMergeTree PARTITION BY d ORDER BY k", "MergeTree(d, k)"} {
		if e, err := parseEngine(bad); err == nil {
			t.Errorf("parseEngine(%q) = %+v, want an error", bad, e)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	tests := []struct {
		in   string
		args []string
		n    int
	}{
		{"() rest", nil, 2},
		{"(a)", []string{"a"}, 3},
		{"( '/x,y' , 'it\\'s', f(a, [b, c]), (d, e) ) ORDER BY k", []string{"'/x,y'", `'it\'s'`, "f(a, [b, c])", "(d, e)"}, 42},
		{"(`a,)`, \"b)\")", []string{"`a,)`", `"b)"`}, 13},
	}
	for _, tt := range tests {
		args, n, err := splitArgs(tt.in)
		if err != nil || !slices.Equal(args, tt.args) || n != tt.n {
			t.Errorf("splitArgs(%q) = %q, %d, %v; want %q, %d", tt.in, args, n, err, tt.args, tt.n)
		}
	}
	if _, _, err := splitArgs("(a, (b)"); err == nil {
		t.Error("unbalanced: no error")
	}
}

func TestHashArgs(t *testing.T) {
	cols := []Column{
		{Name: "d", Type: "Date"},
		{Name: "n", Type: "Nullable(Int32)"},
		{Name: "nd", Type: "Nullable(Decimal(18, 4))"},
		{Name: "a", Type: "Array(Nullable(String))"},
		{Name: "u", Type: "UUID"},
		{Name: "dec", Type: "Decimal(9, 2)"},
		{Name: "lc", Type: "LowCardinality(Nullable(String))"},
		{Name: "ls", Type: "LowCardinality(String)"},
		{Name: "m", Type: "UInt64", DefaultKind: "MATERIALIZED", DefaultExpression: "k"},
		{Name: "al", Type: "UInt64", DefaultKind: "ALIAS", DefaultExpression: "k"},
		{Name: "we`ird", Type: "String"},
	}
	want := "`d`, isNull(`n`), assumeNotNull(`n`), isNull(`nd`), toString(assumeNotNull(`nd`)), toString(`a`), toString(`u`), toString(`dec`), " +
		"isNull(CAST(`lc` AS Nullable(String))), assumeNotNull(CAST(`lc` AS Nullable(String))), `ls`, `m`, `we\\`ird`"
	if got := hashArgs(cols); got != want {
		t.Errorf("hashArgs =\n%s\nwant\n%s", got, want)
	}
}

func TestQuote(t *testing.T) {
	if got, want := quote("a'b\\c\n"), `'a\'b\\c\n'`; got != want {
		t.Errorf("quote = %s, want %s", got, want)
	}
	if got, want := ident("a`b\\c"), "`a\\`b\\\\c`"; got != want {
		t.Errorf("ident = %s, want %s", got, want)
	}
	if got, want := QueryID("move-7", OpDropPartition), "move-7:drop-partition"; got != want {
		t.Errorf("QueryID = %s, want %s", got, want)
	}
}
