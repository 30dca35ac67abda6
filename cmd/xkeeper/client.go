package main

import "github.com/spf13/cobra"

func newClient(g *globals) *cobra.Command {
	return &cobra.Command{Use: "client", Short: "ZooKeeper client verbs against one shard", Hidden: true}
}
