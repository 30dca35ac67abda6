package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// ErrShardExists refuses to bootstrap a member as one of a new shard's
// first members when the shard it would start is running already, or
// when the member was in it already.
var ErrShardExists = errors.New("keeper: the shard is running already")

// adoptWait bounds how long a member started with Options.Bootstrap waits
// for its shard's first member to bootstrap the shard and hand it the
// shard's identity.
const adoptWait = 5 * time.Minute

// probeTimeout bounds the question the shard's first member asks each
// other member before it bootstraps the shard.
const probeTimeout = 3 * time.Second

// MarkBootstrap marks the data directories of the members the cluster
// file places on a member id or node name (ids) so that their next
// start bootstraps a new shard as Options.Bootstrap does (`xkeeper
// bootstrap`, for a service manager that starts `xkeeper serve` with
// fixed arguments). Every directory must hold no member; it returns the
// directories marked.
func MarkBootstrap(c *config.Cluster, ids []string) ([]string, error) {
	var dirs []string
	for _, id := range ids {
		_, m, err := c.Member(id)
		if err != nil {
			return dirs, err
		}
		if err := replica.MarkBootstrap(m.DataDir); err != nil {
			return dirs, fmt.Errorf("keeper: member %s: %w", id, err)
		}
		dirs = append(dirs, m.DataDir)
	}
	return dirs, nil
}

// startMode is how a member starts on its data directory.
type startMode struct {
	join, bootstrap bool
	identity        string
}

// chooseStart decides how member id of shard starts (Start): as its data
// directory says, or, on an empty one, joining a running shard
// (Options.Join) or bootstrapping a new one (Options.Bootstrap or the
// directory's bootstrap mark). Of a new shard's members, the first in the
// cluster file bootstraps it, with a random identity, after checking that
// no other member serves the shard already; each other one waits until
// the first answers, and takes its identity if the first hands it over
// (replica.Adoptable), as a member that joins: the configuration comes
// from the first member's log, never from a second bootstrap.
func chooseStart(m *membership, id, dir string, opts Options, log *slog.Logger) (startMode, error) {
	empty, err := replica.Empty(dir)
	if err != nil {
		return startMode{}, err
	}
	marked, err := replica.BootstrapMarked(dir)
	if err != nil {
		return startMode{}, err
	}
	bootstrap := empty && (opts.Bootstrap || marked)
	switch {
	case opts.Join && opts.Bootstrap:
		return startMode{}, errors.New("keeper: give --join (a new member of a running shard) or --bootstrap (a new shard), not both")
	case opts.Join:
		identity, err := replica.RecordedIdentity(dir)
		if err == nil && identity == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			identity, err = m.identity(ctx, id)
			cancel()
		}
		return startMode{join: true, identity: identity}, err
	case !bootstrap:
		return startMode{}, nil
	case opts.Identity != "":
		return startMode{bootstrap: true, identity: opts.Identity}, nil
	case m.shard.Members[0].ID == id:
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		return startMode{bootstrap: true}, m.noneServes(ctx, id)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), adoptWait)
		defer cancel()
		identity, err := m.adopt(ctx, id, log)
		return startMode{join: true, identity: identity}, err
	}
}

// noneServes asks every other member of the shard, at once, for its
// status, and returns ErrShardExists if one answers: a member that
// serves is a member of the shard (or of another, through a wrong
// address), and a new shard must not be bootstrapped beside it.
func (m *membership) noneServes(ctx context.Context, self string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, mem := range m.shard.Members {
		if mem.ID == self {
			continue
		}
		wg.Go(func() {
			reply, err := admin(ctx, m.auth, mem.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus})
			if err != nil {
				return // not running: nothing to take over
			}
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, fmt.Errorf("%w: member %s at %s serves shard %s (identity %s), so %s cannot bootstrap it anew. "+
				"If %s's data directory was lost, bring it back as a new member: xkeeper member remove --shard %s %s, then start it with --join and run xkeeper member add %s; "+
				"to start the shard anew, stop every member and empty every data directory first",
				ErrShardExists, mem.ID, mem.ClientAddr, reply.Status.Shard, reply.Status.Identity, self, self, m.shard.Name, self, self))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// adopt waits until the shard's first member answers, and returns the
// identity it hands this member (self); ErrShardExists if it hands none.
func (m *membership) adopt(ctx context.Context, self string, log *slog.Logger) (string, error) {
	first := m.shard.Members[0]
	var lastLog time.Time
	for {
		reply, err := admin(ctx, m.auth, first.ClientAddr, replica.AdminRequest{Op: replica.AdminStatus, ID: self})
		if err == nil {
			st := reply.Status
			if err := m.sameShard(first.ID, st); err != nil {
				return "", err
			}
			if st.Adoptable && replica.ValidIdentity(st.Identity) {
				log.Info("took the new shard's identity from its first member", "first", first.ID, "identity", st.Identity)
				return st.Identity, nil
			}
			return "", fmt.Errorf("%w: %s, the first member of shard %s, does not hand its identity to %s: it did not bootstrap the shard within the last %v, "+
				"or %s is not among its voters, or another member has led the shard since, or %s has been a member of the shard already. "+
				"A member that missed the shard's first start, or whose data directory was lost, comes back as a new member: "+
				"xkeeper member remove --shard %s %s (if it is listed), start it with --join, then xkeeper member add %s",
				ErrShardExists, first.ID, m.shard.Name, self, replica.AdoptWindow, self, self, m.shard.Name, self, self)
		}
		if time.Since(lastLog) > 10*time.Second {
			log.Info("waiting for the shard's first member to bootstrap the new shard (start it with --bootstrap too)",
				"first", first.ID, "client_addr", first.ClientAddr, "err", err)
			lastLog = time.Now()
		}
		if perr := pause(ctx); perr != nil {
			return "", fmt.Errorf("keeper: %s, the first member of shard %s, did not bootstrap the new shard in time (start it with --bootstrap as well): %w",
				first.ID, m.shard.Name, err)
		}
	}
}

// emptyDirHint completes replica.ErrEmptyDataDir with what the operator
// does next.
func emptyDirHint(err error, sh *config.Shard, self *config.Member) error {
	if !errors.Is(err, replica.ErrEmptyDataDir) {
		return err
	}
	serve := "--member " + self.ID
	if self.Node != "" {
		serve = "--node " + self.Node
	}
	return fmt.Errorf("%w. On the first start of a new shard, start its members with xkeeper serve --bootstrap (or run xkeeper bootstrap before starting them). "+
		"If member %s's data directory was lost, bring it back as a new member: xkeeper member remove --shard %s %s, then xkeeper serve %s --join, then xkeeper member add %s",
		err, self.ID, sh.Name, self.ID, serve, self.ID)
}
