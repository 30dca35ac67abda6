//go:build cgo

// Command chdbrun runs SQL statements in ClickHouse's clickhouse-local,
// loaded in-process from libchdb (the npm package @chdb/lib-linux-x64-gnu),
// for xkeeper's tests of ClickHouse 26 against a keeper. It is a tool of
// the tests only: the xkeeper binary does not need cgo.
//
//	chdbrun -lib libchdb.so -out results.jsonl [-config config.xml] [-path dir] [-format TSV] < statements.json
//
// stdin is a JSON array of statements, {"sql": ..., "may_fail": bool}.
// They run in turn on one connection (one clickhouse-local engine for the
// whole list); each writes one JSON line to -out: {"statement": i,
// "output": ..., "elapsed": s}, or {"statement": i, "error": ...} if it
// failed. A statement that fails and may not stops the list: chdbrun
// prints its error on stderr and exits 1. Arguments after the flags go to
// clickhouse-local as they are (--logger.level=trace...).
//
// Before it closes the connection, chdbrun detaches the Replicated*
// tables the statements left attached: libchdb 26.7 crashes (SIGSEGV in
// chdb_close_conn) closing a connection that holds one.
package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stdint.h>

// The few entry points of chdb.h (chdb-io/chdb, programs/local/chdb.h)
// chdbrun calls; the npm package ships the library without its header.
typedef struct { void * internal_data; } chdb_result;
typedef struct { void * internal_data; } * chdb_connection;

typedef chdb_connection * (*connect_fn)(int, char **);
typedef void (*close_fn)(chdb_connection *);
typedef chdb_result * (*query_fn)(chdb_connection, const char *, size_t, const char *, size_t);
typedef void (*destroy_fn)(chdb_result *);
typedef char * (*buffer_fn)(chdb_result *);
typedef size_t (*length_fn)(chdb_result *);
typedef double (*elapsed_fn)(chdb_result *);
typedef const char * (*error_fn)(chdb_result *);
typedef void (*signals_fn)(int);
typedef int (*shutdown_fn)(void);

static struct {
	connect_fn connect;
	close_fn close;
	query_fn query;
	destroy_fn destroy;
	buffer_fn buffer;
	length_fn length;
	elapsed_fn elapsed;
	error_fn error;
	signals_fn signals;
	shutdown_fn shutdown;
} chdb;

// chdb_load opens the library and resolves its entry points; it returns
// NULL or the text of what failed.
static const char * chdb_load(const char * path) {
	void * h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) return dlerror();
#define SYM(field, name) if ((*(void **)&chdb.field = dlsym(h, name)) == NULL) return "missing symbol " name;
	SYM(connect, "chdb_connect")
	SYM(close, "chdb_close_conn")
	SYM(query, "chdb_query_n")
	SYM(destroy, "chdb_destroy_query_result")
	SYM(buffer, "chdb_result_buffer")
	SYM(length, "chdb_result_length")
	SYM(elapsed, "chdb_result_elapsed")
	SYM(error, "chdb_result_error")
	SYM(signals, "chdb_set_signal_handlers_enabled")
	SYM(shutdown, "chdb_shutdown")
#undef SYM
	return NULL;
}

static chdb_connection * chdb_do_connect(int argc, char ** argv) {
	// The Go runtime owns the process's signal handlers.
	chdb.signals(0);
	return chdb.connect(argc, argv);
}
static void chdb_do_close(chdb_connection * c) { chdb.close(c); }
static chdb_result * chdb_do_query(chdb_connection * c, const char * q, size_t n, const char * f, size_t fn) {
	return chdb.query(*c, q, n, f, fn);
}
static void chdb_do_destroy(chdb_result * r) { chdb.destroy(r); }
static char * chdb_do_buffer(chdb_result * r) { return chdb.buffer(r); }
static size_t chdb_do_length(chdb_result * r) { return chdb.length(r); }
static double chdb_do_elapsed(chdb_result * r) { return chdb.elapsed(r); }
static const char * chdb_do_error(chdb_result * r) { return chdb.error(r); }
static int chdb_do_shutdown(void) { return chdb.shutdown(); }
*/
import "C"

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"unsafe"
)

// statement is one element of stdin.
type statement struct {
	SQL     string `json:"sql"`
	MayFail bool   `json:"may_fail"`
}

// result is one statement's line in the output file.
type result struct {
	Statement int     `json:"statement"`
	Output    string  `json:"output,omitempty"`
	Error     string  `json:"error,omitempty"`
	Elapsed   float64 `json:"elapsed"`
}

func main() {
	lib := flag.String("lib", "", "path of libchdb.so")
	out := flag.String("out", "", "file the results go to, one JSON line per statement")
	cfg := flag.String("config", "", "clickhouse-local --config-file")
	dir := flag.String("path", "", "clickhouse-local --path (data directory); default in memory")
	format := flag.String("format", "TabSeparated", "output format of every statement")
	flag.Parse()
	if err := run(*lib, *out, *cfg, *dir, *format, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "chdbrun:", err)
		os.Exit(1)
	}
}

func run(lib, out, cfg, dir, format string, extra []string) error {
	if lib == "" || out == "" {
		return errors.New("-lib and -out are required")
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	var statements []statement
	if err := json.Unmarshal(raw, &statements); err != nil {
		return fmt.Errorf("stdin: want a JSON array of {\"sql\": ..., \"may_fail\": bool}: %v", err)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)

	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	if e := C.chdb_load(clib); e != nil {
		return fmt.Errorf("load %s: %s", lib, C.GoString(e))
	}
	args := []string{"clickhouse"}
	if cfg != "" {
		args = append(args, "--config-file="+cfg)
	}
	if dir != "" {
		args = append(args, "--path="+dir)
	}
	args = append(args, extra...)
	argv := make([]*C.char, len(args))
	for i, a := range args {
		argv[i] = C.CString(a)
		defer C.free(unsafe.Pointer(argv[i]))
	}
	conn := C.chdb_do_connect(C.int(len(args)), &argv[0])
	if conn == nil {
		return fmt.Errorf("chdb_connect %q failed", args)
	}
	var failed error
	for i, s := range statements {
		res := query(conn, s.SQL, format)
		res.Statement = i
		if err := enc.Encode(res); err != nil {
			return err
		}
		if res.Error != "" && !s.MayFail {
			failed = fmt.Errorf("statement %d (%s): %s", i, s.SQL, res.Error)
			break
		}
	}
	detachReplicated(conn)
	// Closing the connection ends the engine's keeper session, so that its
	// ephemeral znodes go now rather than at the session timeout.
	C.chdb_do_close(conn)
	C.chdb_do_shutdown()
	return failed
}

// query runs one statement on conn.
func query(conn *C.chdb_connection, sql, format string) result {
	cs, cf := C.CString(sql), C.CString(format)
	defer C.free(unsafe.Pointer(cs))
	defer C.free(unsafe.Pointer(cf))
	r := C.chdb_do_query(conn, cs, C.size_t(len(sql)), cf, C.size_t(len(format)))
	if r == nil {
		return result{Error: "chdb_query_n returned no result"}
	}
	defer C.chdb_do_destroy(r)
	res := result{Elapsed: float64(C.chdb_do_elapsed(r))}
	if e := C.chdb_do_error(r); e != nil {
		res.Error = C.GoString(e)
	} else if n := C.chdb_do_length(r); n > 0 {
		res.Output = C.GoStringN(C.chdb_do_buffer(r), C.int(n))
	}
	return res
}

// detachReplicated detaches every Replicated* table outside the system
// database, so that closing the connection does not crash libchdb.
func detachReplicated(conn *C.chdb_connection) {
	res := query(conn, "SELECT database, name FROM system.tables "+
		"WHERE engine LIKE 'Replicated%' AND database != 'system'", "TabSeparatedRaw")
	if res.Error != "" {
		fmt.Fprintln(os.Stderr, "chdbrun: listing tables to detach:", res.Error)
		return
	}
	quote := func(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
	for line := range strings.Lines(res.Output) {
		db, table, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if r := query(conn, "DETACH TABLE "+quote(db)+"."+quote(table)+" SYNC", "TabSeparated"); r.Error != "" {
			fmt.Fprintln(os.Stderr, "chdbrun:", r.Error)
		}
	}
}
