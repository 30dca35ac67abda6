package testenv

import (
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/xkeeper/xkeeper/config"
)

// RequireClickHouseEnv, when set to 1, makes StartClickHouse fail instead of
// skip the test if clickhouse-server is missing.
const RequireClickHouseEnv = "XKEEPER_REQUIRE_CLICKHOUSE"

// chStartTimeout bounds how long ClickHouse may take to answer /ping.
const chStartTimeout = 60 * time.Second

// ClickHouseOptions configures StartClickHouse. The zero value is a server
// without ZooKeeper.
type ClickHouseOptions struct {
	// ZooKeeper lists the coordination servers as host:port. When empty, the
	// config has no <zookeeper> and no <distributed_ddl> section.
	ZooKeeper []string
	// Shard and Replica are the {shard} and {replica} macros. Shard defaults
	// to "01", Replica to "r" followed by the native port, which is unique
	// among servers started by this package.
	Shard, Replica string
	// Clusters defines remote_servers for ON CLUSTER DDL and Distributed
	// tables: each cluster is one shard whose replicas are host:native-port.
	Clusters map[string][]string
	// NativePort, when not 0, is the native (TCP) port to listen on, so that
	// Clusters can name servers before they start; reserve it with FreePort.
	NativePort int
	// LogLevel is the server log level; it defaults to "information". Use
	// "debug" or "trace" to see ClickHouse's ZooKeeper requests.
	LogLevel string
}

// ClickHouse is a clickhouse-server on loopback started by StartClickHouse.
// Its methods other than Query must be called from the test goroutine.
type ClickHouse struct {
	t       testing.TB
	binary  []string // command and leading arguments
	dir     string
	cfgPath string
	logPath string // stdout and stderr
	errLog  string

	nativePort, httpPort int
	interserverPort      int
	opts                 ClickHouseOptions
	client               *http.Client

	mu   sync.Mutex
	proc *Process
}

// ErrNoClickHouse is returned by LaunchClickHouse when no clickhouse-server
// is installed.
var ErrNoClickHouse = errors.New("testenv: no clickhouse-server or clickhouse binary (Debian package clickhouse-server)")

// StartClickHouse writes a config for a ClickHouse server with its own free
// ports and directories under a test temp dir, starts it, and waits until it
// answers /ping. It is stopped when the test ends. The test is skipped if
// clickhouse-server is not installed, unless XKEEPER_REQUIRE_CLICKHOUSE=1.
func StartClickHouse(t testing.TB, opts ClickHouseOptions) *ClickHouse {
	t.Helper()
	if ClickHouseCommand() == nil {
		skipOrFail(t, RequireClickHouseEnv, "ClickHouse unavailable: no clickhouse-server or clickhouse binary (Debian package clickhouse-server); install it with .ci/install-deps.sh")
	}
	ports := FreePorts(t, 3)
	ch, err := newClickHouse(t.TempDir(), opts, ports)
	if err != nil {
		t.Fatalf("StartClickHouse: %v", err)
	}
	ch.t = t
	t.Cleanup(ch.Stop)
	ch.start()
	return ch
}

// LaunchClickHouse is StartClickHouse outside a test, for tools (xkeeper
// demo): the server keeps its config, data and logs under dir, on free
// loopback ports, until Stop. The methods that take a test (Restart,
// UseZooKeeper) are not for a server started this way.
func LaunchClickHouse(dir string, opts ClickHouseOptions) (*ClickHouse, error) {
	if ClickHouseCommand() == nil {
		return nil, ErrNoClickHouse
	}
	ports, err := config.FreeLoopbackPorts(3)
	if err != nil {
		return nil, err
	}
	ch, err := newClickHouse(dir, opts, ports)
	if err != nil {
		return nil, err
	}
	if err := ch.launch(); err != nil {
		if p := ch.process(); p != nil {
			p.Kill()
		}
		return nil, err
	}
	return ch, nil
}

// newClickHouse writes the config of a server in dir on ports (HTTP,
// interserver, native unless opts names one).
func newClickHouse(dir string, opts ClickHouseOptions, ports []int) (*ClickHouse, error) {
	if opts.NativePort == 0 {
		opts.NativePort = ports[2]
	}
	ch := &ClickHouse{
		binary:     ClickHouseCommand(),
		dir:        dir,
		nativePort: opts.NativePort,
		httpPort:   ports[0],
		client:     &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	ch.cfgPath = filepath.Join(ch.dir, "config.xml")
	ch.logPath = filepath.Join(ch.dir, "stdout.log")
	ch.errLog = filepath.Join(ch.dir, "log", "clickhouse-server.err.log")
	ch.opts, ch.interserverPort = opts, ports[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return ch, ch.writeConfig(opts, ports[1])
}

// ClickHouseCommand finds the server binary, with its leading arguments,
// or returns nil when ClickHouse is not installed: Debian installs
// /usr/sbin/clickhouse-server, which is not on a non-root PATH; upstream
// packages install one clickhouse binary that takes "server".
func ClickHouseCommand() []string {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return []string{p}
	}
	if p := firstExisting("/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"); p != "" {
		return []string{p}
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return []string{p, "server"}
	}
	return nil
}

type chConfig struct {
	Dir                                   string
	LogLevel                              string
	HTTPPort, NativePort, InterserverPort int
	ZooKeeper                             []hostPort
	Shard, Replica                        string
	Clusters                              map[string][]hostPort
}

type hostPort struct{ Index, Host, Port string }

// writeConfig writes config.xml and users.xml. The config is Debian's
// /etc/clickhouse-server/config.xml with every port, path and log moved to
// this server, the incl= substitutions replaced by inline sections, the
// example clusters and graphite/SSL sections dropped, and drop protection off.
func (ch *ClickHouse) writeConfig(opts ClickHouseOptions, interserverPort int) error {
	c := chConfig{
		Dir:             ch.dir,
		LogLevel:        cmp.Or(opts.LogLevel, "information"),
		HTTPPort:        ch.httpPort,
		NativePort:      ch.nativePort,
		InterserverPort: interserverPort,
		Shard:           cmp.Or(opts.Shard, "01"),
		Replica:         cmp.Or(opts.Replica, "r"+strconv.Itoa(ch.nativePort)),
		Clusters:        map[string][]hostPort{},
	}
	var err error
	if c.ZooKeeper, err = splitHostPorts(opts.ZooKeeper); err != nil {
		return err
	}
	for name, replicas := range opts.Clusters {
		if !clusterName.MatchString(name) {
			return fmt.Errorf("cluster name %q is not an XML element name", name)
		}
		if c.Clusters[name], err = splitHostPorts(replicas); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
	}
	for _, sub := range []string{"log", "data"} {
		if err := os.MkdirAll(filepath.Join(ch.dir, sub), 0o755); err != nil {
			return err
		}
	}
	var buf strings.Builder
	if err := chConfigTemplate.Execute(&buf, c); err != nil {
		return err
	}
	if err := os.WriteFile(ch.cfgPath, []byte(buf.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(ch.dir, "users.xml"), []byte(chUsersXML), 0o644)
}

var clusterName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// splitHostPorts splits host:port addresses and numbers them from 1.
func splitHostPorts(addrs []string) ([]hostPort, error) {
	out := make([]hostPort, len(addrs))
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		out[i] = hostPort{Index: strconv.Itoa(i + 1), Host: host, Port: port}
	}
	return out, nil
}

var chConfigTemplate = template.Must(template.New("config.xml").Funcs(template.FuncMap{
	"x": func(s string) string {
		var b strings.Builder
		xml.EscapeText(&b, []byte(s))
		return b.String()
	},
}).Parse(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>{{x .LogLevel}}</level>
        <log>{{x .Dir}}/log/clickhouse-server.log</log>
        <errorlog>{{x .Dir}}/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
    </logger>
    <http_port>{{.HTTPPort}}</http_port>
    <tcp_port>{{.NativePort}}</tcp_port>
    <interserver_http_port>{{.InterserverPort}}</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <listen_host>127.0.0.1</listen_host>
    <max_connections>4096</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>{{x .Dir}}/data/</path>
    <tmp_path>{{x .Dir}}/data/tmp/</tmp_path>
    <user_files_path>{{x .Dir}}/data/user_files/</user_files_path>
    <format_schema_path>{{x .Dir}}/data/format_schemas/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <remote_servers>
{{- range $name, $replicas := .Clusters}}
        <{{$name}}>
            <shard>
                <internal_replication>true</internal_replication>
{{- range $replicas}}
                <replica><host>{{x .Host}}</host><port>{{x .Port}}</port></replica>
{{- end}}
            </shard>
        </{{$name}}>
{{- end}}
    </remote_servers>
{{- if .ZooKeeper}}
    <zookeeper>
{{- range .ZooKeeper}}
        <node index="{{.Index}}"><host>{{x .Host}}</host><port>{{x .Port}}</port></node>
{{- end}}
        <session_timeout_ms>30000</session_timeout_ms>
        <operation_timeout_ms>10000</operation_timeout_ms>
    </zookeeper>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
{{- end}}
    <macros>
        <shard>{{x .Shard}}</shard>
        <replica>{{x .Replica}}</replica>
    </macros>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
    <query_log>
        <database>system</database>
        <table>query_log</table>
        <partition_by>toYYYYMM(event_date)</partition_by>
        <flush_interval_milliseconds>7500</flush_interval_milliseconds>
    </query_log>
    <max_table_size_to_drop>0</max_table_size_to_drop>
    <max_partition_size_to_drop>0</max_partition_size_to_drop>
</yandex>
`))

// chUsersXML is Debian's users.xml with the default user (no password)
// reachable from loopback only.
const chUsersXML = `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>10000000000</max_memory_usage>
            <use_uncompressed_cache>0</use_uncompressed_cache>
            <load_balancing>random</load_balancing>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`

// start launches the server and waits until /ping answers "Ok.", or
// fails the test.
func (ch *ClickHouse) start() {
	ch.t.Helper()
	began := time.Now()
	if err := ch.launch(); err != nil {
		ch.t.Fatalf("ClickHouse: %v", err)
	}
	ch.t.Logf("ClickHouse ready at native %s, http %s in %v", ch.NativeAddr(), ch.HTTPAddr(), time.Since(began).Round(time.Millisecond))
}

// launch starts the server process and waits until /ping answers "Ok.".
func (ch *ClickHouse) launch() error {
	args := append(append([]string{}, ch.binary[1:]...), "--config-file="+ch.cfgPath)
	cmd := exec.Command(ch.binary[0], args...)
	cmd.Dir = ch.dir
	p, err := startProcess(cmd, ch.logPath)
	if err != nil {
		return err
	}
	ch.mu.Lock()
	ch.proc = p
	ch.mu.Unlock()
	err = p.WaitReady(chStartTimeout, func(ctx context.Context) error {
		body, err := ch.get(ctx, "/ping")
		if err == nil && body != "Ok.\n" {
			err = fmt.Errorf("/ping answered %q", body)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: %w\n%s", ch.HTTPAddr(), err, ch.LogTail())
	}
	return nil
}

func (ch *ClickHouse) process() *Process {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.proc
}

// NativeAddr returns the native protocol (TCP) address as host:port.
func (ch *ClickHouse) NativeAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ch.nativePort))
}

// HTTPAddr returns the HTTP interface address as host:port.
func (ch *ClickHouse) HTTPAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ch.httpPort))
}

// PID returns the server's process id.
func (ch *ClickHouse) PID() int { return ch.process().PID() }

// Query runs sql through the HTTP interface and returns the result as
// ClickHouse's default TabSeparated text. A non-200 answer is an error that
// carries ClickHouse's exception text.
func (ch *ClickHouse) Query(ctx context.Context, sql string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ch.HTTPAddr()+"/", strings.NewReader(sql))
	if err != nil {
		return "", err
	}
	return ch.do(req)
}

// MustQuery is Query for runnable examples: the result without its final
// newline; an error panics.
func (ch *ClickHouse) MustQuery(ctx context.Context, sql string) string {
	out, err := ch.Query(ctx, sql)
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(out, "\n")
}

func (ch *ClickHouse) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ch.HTTPAddr()+path, nil)
	if err != nil {
		return "", err
	}
	return ch.do(req)
}

func (ch *ClickHouse) do(req *http.Request) (string, error) {
	resp, err := ch.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("clickhouse %s: %s: %s", ch.HTTPAddr(), resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// Stop shuts the server down (SIGTERM, then SIGKILL after a grace period) and
// waits for it. It is called when the test ends.
func (ch *ClickHouse) Stop() {
	if p := ch.process(); p != nil {
		p.Stop(30 * time.Second)
	}
	ch.client.CloseIdleConnections()
}

// Kill sends SIGKILL to the server and waits for it to exit.
func (ch *ClickHouse) Kill() { ch.process().Kill() }

// Restart stops the server if it is running and starts it again with the same
// config, ports and data, waiting until it answers /ping.
func (ch *ClickHouse) Restart() {
	ch.t.Helper()
	ch.Stop()
	ch.start()
}

// UseZooKeeper stops the server, points its config at other coordination
// servers (a migration from one keeper to another), and starts it again.
func (ch *ClickHouse) UseZooKeeper(servers []string) {
	ch.t.Helper()
	ch.Stop()
	ch.opts.ZooKeeper = servers
	if err := ch.writeConfig(ch.opts, ch.interserverPort); err != nil {
		ch.t.Fatalf("UseZooKeeper: %v", err)
	}
	ch.start()
}

// LogTail returns the last lines of the server's error log and of its
// stdout/stderr, for failure messages.
func (ch *ClickHouse) LogTail() string {
	return fmt.Sprintf("clickhouse error log %s:\n%s\nclickhouse stdout/stderr:\n%s",
		ch.errLog, indent(tailFile(ch.errLog, 40)), indent(ch.process().LogTail(20)))
}
