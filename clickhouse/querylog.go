package clickhouse

import (
	"context"
	"errors"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// LoggedQuery is one row of system.query_log.
type LoggedQuery struct {
	QueryID string
	// Type is QueryStart, QueryFinish, ExceptionBeforeStart or
	// ExceptionWhileProcessing.
	Type      string
	EventTime time.Time
	Query     string
	Exception string
}

// queryLogTypes names the values of system.query_log.type, a number in
// 18.16 and an Enum8 of these names in later versions.
var queryLogTypes = map[string]string{
	"1": "QueryStart",
	"2": "QueryFinish",
	"3": "ExceptionBeforeStart",
	"4": "ExceptionWhileProcessing",
}

// QueryLog flushes the server's logs (SYSTEM FLUSH LOGS) and returns the
// rows of system.query_log whose query_id starts with qid followed by a
// colon, the statements of move qid on this server, oldest first. A server
// that has logged no query yet has no query_log table and returns none.
func (c *Conn) QueryLog(ctx context.Context, qid string) ([]LoggedQuery, error) {
	const op = "read query log"
	if err := c.exec(ctx, "", "SYSTEM FLUSH LOGS"); err != nil {
		return nil, c.fail(op, "system.query_log", "", "", err)
	}
	var out []LoggedQuery
	err := c.selectRows(ctx, `SELECT query_id, toString(type), event_time, query, exception FROM system.query_log
		WHERE startsWith(query_id, `+quote(QueryID(qid, ""))+`) ORDER BY event_time, query_start_time, type`,
		func(r driver.Rows) error {
			var q LoggedQuery
			if err := r.Scan(&q.QueryID, &q.Type, &q.EventTime, &q.Query, &q.Exception); err != nil {
				return err
			}
			if name, ok := queryLogTypes[q.Type]; ok {
				q.Type = name
			}
			out = append(out, q)
			return nil
		})
	var exc *ch.Exception
	if errors.As(err, &exc) && exc.Code == codeUnknownTable {
		return nil, nil
	}
	if err != nil {
		return nil, c.fail(op, "system.query_log", "", "", err)
	}
	return out, nil
}
