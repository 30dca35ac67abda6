package keeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestClickHouseBesideTLSClients: ClickHouse 18.16, which cannot speak TLS
// to a keeper, replicates through the plain port while a client with a
// certificate of the cluster's CA writes through the secure port, which
// requires one; clients with a certificate of another CA, or none, get no
// session there.
func TestClickHouseBesideTLSClients(t *testing.T) {
	c := testenv.StartShard(t, 3)
	ca, stranger := testenv.NewCA(t), testenv.NewCA(t)
	ca.SecureClientPorts(t, c, "required")
	var secure []string
	for _, m := range c.Shard("a").Members {
		secure = append(secure, m.SecureClientAddr)
	}
	tlsClient := func(ca *testenv.CA) client.Option {
		cert, key := ca.Issue(t, "client")
		cfg, err := config.ClientConfig(ca.File(), cert, key)
		require.NoError(t, err)
		return client.WithTLS(cfg)
	}

	chs := startReplicas(t, c.Servers("a"))
	for _, ch := range chs {
		chQuery(t, ch, "CREATE TABLE t1 "+fmt.Sprintf(chTable, "t1"))
	}

	cl := connect(t, secure, tlsClient(ca))
	for i := range 20 {
		chQuery(t, chs[i%2], fmt.Sprintf(`INSERT INTO t1 VALUES ('2024-01-15', %d, 'x')`, i))
		_, err := cl.Create(t.Context(), fmt.Sprintf("/tls-%d", i), []byte("over tls"), 0, proto.WorldACL(proto.PermAll))
		require.NoError(t, err)
	}
	chWait(t, chs[0], `SELECT count() FROM t1`, "20\n")
	chWait(t, chs[1], `SELECT count() FROM t1`, "20\n")
	children, err := cl.GetChildren(t.Context(), "/")
	require.NoError(t, err)
	assert.Contains(t, children, "clickhouse", "the TLS client does not see ClickHouse's znodes")

	for name, opts := range map[string][]client.Option{
		"a certificate of another CA": {tlsClient(stranger)},
		"no TLS":                      nil,
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		bad, err := client.Connect(ctx, secure, append(opts, client.WithLogger(testenv.TestLogger(t)))...)
		cancel()
		if err == nil {
			bad.Close()
		}
		assert.Error(t, err, "%s: a session on the secure port", name)
	}
}
