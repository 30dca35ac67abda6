package keeper

import (
	"reflect"
	"runtime"
)

// BalancerLoop is the name of the function a node's leader balancer runs
// in, as a goroutine dump shows it.
var BalancerLoop = runtime.FuncForPC(reflect.ValueOf((*balancer).run).Pointer()).Name()
