package movepart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// Owner is the content of a move's owner znode: the process driving it.
type Owner struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// String returns "host pid N since T".
func (o Owner) String() string {
	return fmt.Sprintf("%s pid %d since %s", o.Host, o.PID, o.Since.Format(time.RFC3339))
}

// OwnedError means another live process drives the move.
type OwnedError struct {
	Move  string
	Owner Owner
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("movepart: move %s is driven by %s (its ownership ends with that process's keeper session)", e.Move, e.Owner)
}

// ErrLostOwnership means the driver's keeper session ended: the move may
// now be driven by another process, so this one stops.
var ErrLostOwnership = errors.New("movepart: lost ownership of the move (keeper session ended)")

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }

// ownership is a held owner znode.
type ownership struct {
	shard   string
	path    string
	session int64
}

// own makes this process the owner of move rec: an ephemeral znode on the
// source's shard, held by the router's session there.
func (s *Store) own(ctx context.Context, rec *Record) (*ownership, error) {
	if err := s.ensureDirs(ctx, rec.Source.Shard); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	_, path := paths(rec.ID)
	data := encode(Owner{Host: host, PID: os.Getpid(), Since: time.Now().UTC()})
	backoff := 10 * time.Millisecond
	for {
		c, err := s.r.Client(ctx, rec.Source.Shard)
		if err != nil {
			return nil, err
		}
		o := &ownership{shard: rec.Source.Shard, path: path, session: c.SessionID()}
		_, err = c.Create(ctx, path, data, proto.FlagEphemeral, s.acl)
		if err == nil {
			return o, nil
		}
		if !errors.Is(err, proto.ErrNodeExists) {
			if !transient(err) || ctx.Err() != nil {
				return nil, fmt.Errorf("movepart: take ownership of move %s: %w", rec.ID, s.Explain(err))
			}
			// The router replaces a lost session; try again.
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		held, stat, found, err := s.Get(ctx, o.shard, path)
		switch {
		case err != nil:
			return nil, err
		case !found:
			continue // released meanwhile
		case stat.EphemeralOwner == o.session:
			return o, nil // an earlier attempt of ours made it
		}
		e := &OwnedError{Move: rec.ID}
		_ = decodeJSON(held, &e.Owner)
		return nil, e
	}
}

// transient reports whether a keeper error may pass on its own.
func transient(err error) bool {
	var code proto.Code
	if !errors.As(err, &code) {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	switch code {
	case proto.ErrConnectionLoss, proto.ErrSessionExpired, proto.ErrSessionMoved, proto.ErrOperationTimeout:
		return true
	}
	return false
}

// check returns ErrLostOwnership unless the owner znode is still held by
// this process's session.
func (s *Store) check(ctx context.Context, o *ownership) error {
	_, stat, found, err := s.Get(ctx, o.shard, o.path)
	if err != nil {
		return err
	}
	if !found || stat.EphemeralOwner != o.session {
		return ErrLostOwnership
	}
	return nil
}

// release deletes the owner znode if this process's session still holds
// it, through that session only (never a newer one's znode).
func (s *Store) release(ctx context.Context, o *ownership) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c, err := s.r.Client(ctx, o.shard)
	if err != nil || c.SessionID() != o.session {
		return // the session ended: its ephemeral owner znode went with it
	}
	if s.check(ctx, o) == nil {
		_ = c.Delete(ctx, o.path, -1)
	}
}

// OwnerOf reads who owns move id (found false when nobody does).
func (s *Store) OwnerOf(ctx context.Context, shard, id string) (o Owner, found bool, err error) {
	_, path := paths(id)
	data, _, found, err := s.Get(ctx, shard, path)
	if err != nil || !found {
		return Owner{}, false, err
	}
	err = decodeJSON(data, &o)
	return o, true, err
}
