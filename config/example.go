package config

import _ "embed"

// Example is a commented cluster file with every keeper key at its
// default: one shard of three members on loopback.
//
//go:embed example.yaml
var Example []byte
