package client

import (
	"context"
	"errors"
	"slices"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// createRequest builds a create; a nil acl means world:anyone, all
// permissions (an empty ACL is never valid).
func createRequest(path string, data []byte, flags int32, acl []proto.ACL) *proto.CreateRequest {
	if acl == nil {
		acl = proto.WorldACL(proto.PermAll)
	}
	return &proto.CreateRequest{Path: path, Data: data, ACL: acl, Flags: flags}
}

// Create makes a znode and returns its path, with the suffix a sequential
// flag adds. flags are proto.FlagEphemeral, proto.FlagSequential...; a nil
// acl means world:anyone with every permission.
func (c *Client) Create(ctx context.Context, path string, data []byte, flags int32, acl []proto.ACL) (string, error) {
	var resp proto.PathRequest
	_, err := c.Do(ctx, proto.OpCreate, createRequest(path, data, flags, acl), &resp)
	return resp.Path, err
}

// Create2 is Create that also returns the new znode's Stat.
func (c *Client) Create2(ctx context.Context, path string, data []byte, flags int32, acl []proto.ACL) (string, *proto.Stat, error) {
	var resp proto.Create2Response
	if _, err := c.Do(ctx, proto.OpCreate2, createRequest(path, data, flags, acl), &resp); err != nil {
		return "", nil, err
	}
	return resp.Path, &resp.Stat, nil
}

// Delete removes a znode if its version matches (-1: any version).
func (c *Client) Delete(ctx context.Context, path string, version int32) error {
	_, err := c.Do(ctx, proto.OpDelete, &proto.PathVersionRequest{Path: path, Version: version}, nil)
	return err
}

// Exists reports whether a znode exists, with its Stat when it does.
func (c *Client) Exists(ctx context.Context, path string) (bool, *proto.Stat, error) {
	ok, st, _, err := c.exists(ctx, path, nil)
	return ok, st, err
}

// ExistsW is Exists that also leaves a watch, present node or not: the
// channel receives the next created, deleted or data-changed event of the
// znode, then closes.
func (c *Client) ExistsW(ctx context.Context, path string) (bool, *proto.Stat, <-chan Event, error) {
	return c.exists(ctx, path, newWatchReq(path, watchData, true))
}

func (c *Client) exists(ctx context.Context, path string, w *watchReq) (bool, *proto.Stat, <-chan Event, error) {
	var resp proto.StatResponse
	_, err := c.send(ctx, proto.OpExists, &proto.PathWatchRequest{Path: path, Watch: w != nil}, &resp, w, false)
	switch {
	case errors.Is(err, proto.ErrNoNode):
		return false, nil, w.channel(), nil
	case err != nil:
		return false, nil, nil, err
	}
	return true, &resp.Stat, w.channel(), nil
}

func (w *watchReq) channel() <-chan Event {
	if w == nil {
		return nil
	}
	return w.ch
}

// Get returns a znode's data and Stat.
func (c *Client) Get(ctx context.Context, path string) ([]byte, *proto.Stat, error) {
	data, st, _, err := c.get(ctx, path, nil)
	return data, st, err
}

// GetW is Get that also leaves a watch: the channel receives the next
// data-changed or deleted event of the znode, then closes.
func (c *Client) GetW(ctx context.Context, path string) ([]byte, *proto.Stat, <-chan Event, error) {
	return c.get(ctx, path, newWatchReq(path, watchData, false))
}

func (c *Client) get(ctx context.Context, path string, w *watchReq) ([]byte, *proto.Stat, <-chan Event, error) {
	var resp proto.GetDataResponse
	if _, err := c.send(ctx, proto.OpGetData, &proto.PathWatchRequest{Path: path, Watch: w != nil}, &resp, w, false); err != nil {
		return nil, nil, nil, err
	}
	return resp.Data, &resp.Stat, w.channel(), nil
}

// Set replaces a znode's data if its version matches (-1: any version)
// and returns the new Stat.
func (c *Client) Set(ctx context.Context, path string, data []byte, version int32) (*proto.Stat, error) {
	var resp proto.StatResponse
	if _, err := c.Do(ctx, proto.OpSetData, &proto.SetDataRequest{Path: path, Data: data, Version: version}, &resp); err != nil {
		return nil, err
	}
	return &resp.Stat, nil
}

// GetChildren returns the names of a znode's children (getChildren).
func (c *Client) GetChildren(ctx context.Context, path string) ([]string, error) {
	var resp proto.ChildrenResponse
	_, err := c.Do(ctx, proto.OpGetChildren, &proto.PathWatchRequest{Path: path}, &resp)
	return resp.Children, err
}

// GetChildren2 returns the names of a znode's children and its Stat
// (getChildren2).
func (c *Client) GetChildren2(ctx context.Context, path string) ([]string, *proto.Stat, error) {
	kids, st, _, err := c.children(ctx, path, nil)
	return kids, st, err
}

// ChildrenW is GetChildren2 that also leaves a watch: the channel receives
// the next children-changed or deleted event of the znode, then closes.
func (c *Client) ChildrenW(ctx context.Context, path string) ([]string, *proto.Stat, <-chan Event, error) {
	return c.children(ctx, path, newWatchReq(path, watchChild, false))
}

func (c *Client) children(ctx context.Context, path string, w *watchReq) ([]string, *proto.Stat, <-chan Event, error) {
	resp := proto.ChildrenResponse{WithStat: true}
	if _, err := c.send(ctx, proto.OpGetChildren2, &proto.PathWatchRequest{Path: path, Watch: w != nil}, &resp, w, false); err != nil {
		return nil, nil, nil, err
	}
	return resp.Children, &resp.Stat, w.channel(), nil
}

// GetACL returns a znode's ACL and Stat.
func (c *Client) GetACL(ctx context.Context, path string) ([]proto.ACL, *proto.Stat, error) {
	var resp proto.GetACLResponse
	if _, err := c.Do(ctx, proto.OpGetACL, &proto.PathRequest{Path: path}, &resp); err != nil {
		return nil, nil, err
	}
	return resp.ACL, &resp.Stat, nil
}

// SetACL replaces a znode's ACL if its ACL version matches (-1: any) and
// returns the new Stat.
func (c *Client) SetACL(ctx context.Context, path string, acl []proto.ACL, version int32) (*proto.Stat, error) {
	var resp proto.StatResponse
	if _, err := c.Do(ctx, proto.OpSetACL, &proto.SetACLRequest{Path: path, ACL: acl, Version: version}, &resp); err != nil {
		return nil, err
	}
	return &resp.Stat, nil
}

// Sync waits until the member serving this client has applied every write
// the shard committed before the sync, and returns the path.
func (c *Client) Sync(ctx context.Context, path string) (string, error) {
	var resp proto.PathRequest
	_, err := c.Do(ctx, proto.OpSync, &proto.PathRequest{Path: path}, &resp)
	return resp.Path, err
}

// GetAllChildrenNumber returns the number of a znode's descendants.
func (c *Client) GetAllChildrenNumber(ctx context.Context, path string) (int32, error) {
	var resp proto.CountResponse
	_, err := c.Do(ctx, proto.OpGetAllChildrenNumber, &proto.PathRequest{Path: path}, &resp)
	return resp.Count, err
}

// GetEphemerals returns the paths of this session's ephemeral znodes that
// start with prefix ("/" or "" for all).
func (c *Client) GetEphemerals(ctx context.Context, prefix string) ([]string, error) {
	var resp proto.ChildrenResponse
	_, err := c.Do(ctx, proto.OpGetEphemerals, &proto.PathRequest{Path: prefix}, &resp)
	return resp.Children, err
}

// WhoAmI returns the identities the member knows this connection by.
func (c *Client) WhoAmI(ctx context.Context) ([]proto.ID, error) {
	var resp proto.WhoAmIResponse
	_, err := c.Do(ctx, proto.OpWhoAmI, proto.Empty{}, &resp)
	return resp.IDs, err
}

// AddAuth adds credentials to the session ("digest", "user:password");
// they are sent again on every reattach. A member refuses bad credentials
// with proto.ErrAuthFailed and drops the connection.
func (c *Client) AddAuth(ctx context.Context, scheme string, auth []byte) error {
	a := proto.AuthPacket{Scheme: scheme, Auth: slices.Clone(auth)}
	if _, err := c.Do(ctx, proto.OpAuth, &a, nil); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, have := range c.auths {
		if have.Scheme == a.Scheme && string(have.Auth) == string(a.Auth) {
			return nil
		}
	}
	c.auths = append(c.auths, a)
	return nil
}
