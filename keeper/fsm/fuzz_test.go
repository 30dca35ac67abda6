package fsm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// fuzzWall is the wall clock of fuzzBase's entry; the session it opens has
// an id derived from it, so seeds can name it.
const fuzzWall int64 = 1_000_000

// fuzzBase returns a state with one session (on m1) owning the ephemeral
// /f/e under the persistent /f.
func fuzzBase(t testing.TB) (*State, testClient) {
	s := New()
	res, _, err := s.Apply(EncodeEntry(nil, fuzzWall, []Request{openSession(m1, 30000, []byte("pw"))}))
	if err != nil || res[0].Err != proto.ErrOK {
		t.Fatalf("fuzz base: %v %v", err, res)
	}
	c := testClient{sess: res[0].Session, member: m1}
	res, _, err = s.Apply(EncodeEntry(nil, fuzzWall+1, []Request{c.create("/f", nil, 0), c.create("/f/e", nil, eph)}))
	if err != nil || res[0].Err != proto.ErrOK || res[1].Err != proto.ErrOK {
		t.Fatalf("fuzz base: %v %v", err, res)
	}
	return s, c
}

// fuzzSeeds are valid entries that reach every kind of request.
func fuzzSeeds(t testing.TB) [][]byte {
	_, c := fuzzBase(t)
	entry := func(reqs ...Request) []byte { return EncodeEntry(nil, fuzzWall+10, reqs) }
	return [][]byte{
		entry(),
		entry(openSession(m2, 1000, []byte("0123456789abcdef"))),
		entry(c.create("/f/a", []byte("data"), 0), c.create("/f/s-", nil, seq|eph), c.create2("/f/", nil, seq)),
		entry(c.setData("/f", []byte("x"), 0), c.setACL("/f", aliceAll, -1), c.as(aliceID).delete("/f/e", -1)),
		entry(c.multi(opCreate("/f/b", 0), opDelete("/f/b", -1), opCheck("/f", 0), opSetData("/f", nil, -1), opCreate2("/f/c", nil))),
		entry(c.multi(opCreate("/f/e", 0), opCreate("/f/x", 0))),
		entry(c.req(proto.OpCreateContainer, &proto.CreateRequest{Path: "/box", ACL: openACL, Flags: proto.FlagContainer}),
			c.req(proto.OpCreateTTL, &proto.CreateTTLRequest{CreateRequest: proto.CreateRequest{Path: "/t", ACL: openACL, Flags: 5}, TTL: 9})),
		entry(c.on(m2).req(OpSessionOwner, nil), c.on(m2).create("/f/m2", nil, eph), c.close()),
		entry(Request{Op: proto.OpSync, Body: proto.Marshal(&proto.PathRequest{Path: "/f"})}),
		entry(numbered(c.as(aliceID, localIP).create("/f/i", nil, 0), c.as(aliceID, localIP).delete("/f/i", -1))...), // an identity table
	}
}

// FuzzDecodeEntry applies arbitrary bytes as a log entry: it must not
// panic, a corrupt entry must change nothing, official time must not go
// back, and whatever state results must still be consistent and survive a
// snapshot round trip.
func FuzzDecodeEntry(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, reqs, decodeErr := DecodeEntry(data)
		base, _ := fuzzBase(t)
		for _, s := range []*State{New(), base} {
			before := dumpState(s)
			results, events, err := s.Apply(data)
			if (err == nil) != (decodeErr == nil) {
				t.Fatalf("Apply err %v, DecodeEntry err %v", err, decodeErr)
			}
			if err != nil {
				if d := diffDumps(dumpState(s), before); d != "" {
					t.Fatalf("a corrupt entry changed the state: %s", d)
				}
				continue
			}
			if len(results) != len(reqs) || s.Zxid() != before.Zxid+int64(len(reqs)) || s.Time() < before.Time {
				t.Fatalf("%d results for %d requests, zxid %d -> %d, time %d -> %d",
					len(results), len(reqs), before.Zxid, s.Zxid(), before.Time, s.Time())
			}
			for _, e := range events {
				if e.Zxid <= before.Zxid || e.Zxid > s.Zxid() {
					t.Fatalf("event %+v outside zxids (%d, %d]", e, before.Zxid, s.Zxid())
				}
			}
			checkInvariants(t, s)
			b := snapshotBytes(t, s)
			if !bytes.Equal(snapshotBytes(t, mustRestore(t, b)), b) {
				t.Fatal("snapshot does not round-trip")
			}
		}
	})
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzDecodeEntry from
// fuzzSeeds when XKEEPER_WRITE_FUZZ_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("XKEEPER_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set XKEEPER_WRITE_FUZZ_SEEDS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeEntry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, seed := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(seed)))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
