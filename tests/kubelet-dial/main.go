// kubelet-dial: one unary gRPC call to a plugin's unix socket, dialled as the kubelet's plugin
// watcher dials a registration socket (pkg/kubelet/pluginmanager/operationexecutor, dial()):
// grpc.DialContext on the socket's path, insecure, blocking, a unix dialer, no WithAuthority,
// so grpc-go's passthrough resolver names the path as HTTP/2 :authority. The request is an
// empty message; the answer's bytes are printed in hex, or the call's error, as JSON.
//
// With "dra" after the method, it dials as the kubelet's DRA plugin manager dials a DRA socket
// (pkg/kubelet/cm/dra/plugin, grpc.NewClient("unix:" + endpoint)): the unix resolver, which
// names "localhost" as :authority.
//
//	kubelet-dial SOCKET METHOD [dra]
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
)

// raw passes messages as the bytes they are.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (raw) Name() string { return "proto" }

func main() {
	if len(os.Args) < 3 || len(os.Args) > 4 || (len(os.Args) == 4 && os.Args[3] != "dra") {
		fmt.Fprintln(os.Stderr, "usage: kubelet-dial SOCKET METHOD [dra]")
		os.Exit(2)
	}
	socket, method := os.Args[1], os.Args[2]
	out := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c *grpc.ClientConn
	var err error
	if len(os.Args) == 4 {
		//lint:ignore SA1019 grpc.NewClient is newer than this module's grpc-go
		c, err = grpc.DialContext(ctx, "unix:"+socket, grpc.WithInsecure(), grpc.WithBlock())
	} else {
		//lint:ignore SA1019 the kubelet's own calls
		c, err = grpc.DialContext(ctx, socket, grpc.WithInsecure(), grpc.WithBlock(),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", addr)
			}),
		)
	}
	if err != nil {
		out["error"] = fmt.Sprintf("dial: %v", err)
	} else {
		defer c.Close()
		in, reply := []byte{}, []byte{}
		if err := c.Invoke(ctx, method, &in, &reply, grpc.ForceCodec(raw{})); err != nil {
			out["error"] = err.Error()
		} else {
			out["reply"] = hex.EncodeToString(reply)
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
