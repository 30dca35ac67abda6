package keeper_test

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// flagProxy stands between a ZooKeeper client and a keeper: it adds flags
// to every answer to a getData of /keeper/feature_flags, so that the
// client believes the keeper serves them, and it keeps the raw body of
// every request whose opcode it records. It is how the wire layouts of
// ClickHouse Keeper's extensions are captured from ClickHouse itself
// before xkeeper serves them (docs/clickhouse-keeper-layouts.md).
type flagProxy struct {
	ln     net.Listener
	target string
	add    []proto.FeatureFlag
	record map[proto.OpCode]bool

	mu       sync.Mutex
	conns    []net.Conn
	captured []capturedRequest
}

// capturedRequest is one request the proxy recorded: its opcode and its
// body after the request header (xid, opcode).
type capturedRequest struct {
	Op   proto.OpCode
	Body []byte
}

// startFlagProxy starts a flagProxy to target on loopback, closed with
// the test.
func startFlagProxy(t *testing.T, target string, add []proto.FeatureFlag, record ...proto.OpCode) *flagProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &flagProxy{ln: ln, target: target, add: add, record: map[proto.OpCode]bool{}}
	for _, op := range record {
		p.record[op] = true
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.accept(&wg)
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// Addr is the proxy's client address.
func (p *flagProxy) Addr() string { return p.ln.Addr().String() }

// Captured returns the requests recorded so far.
func (p *flagProxy) Captured() []capturedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]capturedRequest(nil), p.captured...)
}

func (p *flagProxy) accept(wg *sync.WaitGroup) {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		flagReads := &sync.Map{} // xids of the client's getData of the flags
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer server.Close()
			p.pump(client, server, func(frame []byte) { p.request(frame, flagReads) })
		}()
		go func() {
			defer wg.Done()
			defer client.Close()
			p.pump(server, client, func(frame []byte) { p.answer(frame, flagReads) })
		}()
	}
}

// pump copies length-prefixed frames from src to dst, passing every frame
// after the first (the connect handshake) through see, which may change
// it in place.
func (p *flagProxy) pump(src, dst net.Conn, see func([]byte)) {
	var size [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(src, size[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 64<<20 {
			return
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(src, frame); err != nil {
			return
		}
		if !first {
			see(frame)
		}
		if _, err := dst.Write(append(size[:], frame...)); err != nil {
			return
		}
	}
}

// request records a request the proxy keeps and notes the xid of a
// getData of the feature flags.
func (p *flagProxy) request(frame []byte, flagReads *sync.Map) {
	if len(frame) < 8 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(frame))
	op := proto.OpCode(binary.BigEndian.Uint32(frame[4:]))
	body := frame[8:]
	if op == proto.OpGetData {
		if path, err := jutePath(body); err == nil && path == proto.KeeperFeatureFlagsPath {
			flagReads.Store(xid, true)
		}
	}
	if p.record[op] {
		p.mu.Lock()
		p.captured = append(p.captured, capturedRequest{op, append([]byte(nil), body...)})
		p.mu.Unlock()
	}
}

// answer sets the proxy's flags in an answer to a getData of the feature
// flags: the bitmap keeps its length, so the frame does too.
func (p *flagProxy) answer(frame []byte, flagReads *sync.Map) {
	const header = 4 + 8 + 4 // xid, zxid, error
	if len(frame) < header+4 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(frame))
	if _, ok := flagReads.LoadAndDelete(xid); !ok || binary.BigEndian.Uint32(frame[12:]) != 0 {
		return
	}
	n := int32(binary.BigEndian.Uint32(frame[header:]))
	data := frame[header+4:]
	if n < 0 || int(n) > len(data) {
		return
	}
	data = data[:n]
	for _, f := range p.add {
		if int(f/8) < len(data) {
			data[f/8] |= 1 << (7 - f%8)
		}
	}
}

// jutePath reads the jute string that starts body.
func jutePath(body []byte) (string, error) {
	if len(body) < 4 {
		return "", errors.New("short")
	}
	n := int32(binary.BigEndian.Uint32(body))
	if n < 0 || int(n) > len(body)-4 {
		return "", errors.New("bad length")
	}
	return string(body[4 : 4+n]), nil
}

// hexDump is body in hex, for a test's log.
func hexDump(body []byte) string { return hex.EncodeToString(body) }

// TestClickHouse26WithCheckStatAndListFlags runs ClickHouse 26.7 against
// a shard through a flagProxy that also sets CHECK_STAT (LIST_WITH_STAT_
// AND_DATA xkeeper advertises itself): ClickHouse logs both enabled, its
// KeeperMap statements and experimental transactions still succeed, and
// every checkStat, list with stat and data and multiRead it sends has the
// layout docs/clickhouse-keeper-layouts.md gives (ClickHouse 26.7.3 sent
// neither op in these statements: see the doc).
func TestClickHouse26WithCheckStatAndListFlags(t *testing.T) {
	c := testenv.StartShard(t, 1)
	p := startFlagProxy(t, c.Servers("a")[0], []proto.FeatureFlag{proto.FeatureCheckStat},
		proto.OpCheckStat, proto.OpFilteredListWithStatsAndData, proto.OpMultiRead)
	ch := testenv.NewCHDB(t, testenv.CHDBOptions{Servers: []string{p.Addr()},
		ExtraConfig: "  <allow_experimental_transactions>42</allow_experimental_transactions>\n"})
	answers, _, err := ch.Run(
		testenv.CHDBStatement{SQL: `CREATE TABLE km (key String, v UInt64) ENGINE = KeeperMap('/km') PRIMARY KEY key`},
		testenv.CHDBStatement{SQL: `INSERT INTO km VALUES ('a', 1), ('b', 2)`},
		testenv.CHDBStatement{SQL: `SELECT key, v FROM km WHERE key IN ('a', 'b', 'c') ORDER BY key`},
		testenv.CHDBStatement{SQL: `CREATE TABLE mt (k UInt64) ENGINE = MergeTree ORDER BY k`},
		testenv.CHDBStatement{SQL: `BEGIN TRANSACTION`},
		testenv.CHDBStatement{SQL: `INSERT INTO mt VALUES (1)`},
		testenv.CHDBStatement{SQL: `COMMIT`},
		testenv.CHDBStatement{SQL: `SELECT count() FROM mt`},
	)
	require.NoError(t, err)
	assert.Equal(t, "a\t1\nb\t2\n", answers[2].Output)
	assert.Equal(t, "1\n", answers[7].Output)
	flags := ch.FeatureFlags()
	assert.True(t, flags["CHECK_STAT"], "the proxy's flag")
	assert.True(t, flags["LIST_WITH_STAT_AND_DATA"], "xkeeper's own flag")
	counts := map[proto.OpCode]int{}
	for _, r := range p.Captured() {
		counts[r.Op]++
		switch r.Op {
		case proto.OpCheckStat:
			path, err := jutePath(r.Body)
			require.NoError(t, err)
			assert.Len(t, r.Body, 4+len(path)+4+68, "checkStat: path, version, stat: %s", hexDump(r.Body))
		case proto.OpFilteredListWithStatsAndData:
			assert.NoError(t, proto.Unmarshal(r.Body, &proto.ListWithStatsAndDataRequest{}), "%s", hexDump(r.Body))
		case proto.OpMultiRead:
			assert.NoError(t, proto.Unmarshal(r.Body, &proto.MultiRequest{}), "%s", hexDump(r.Body))
		}
	}
	t.Logf("requests ClickHouse 26.7 sent, of those recorded: %v", counts)
	assert.NotZero(t, counts[proto.OpMultiRead], "KeeperMap reads keys with multiRead")
}
