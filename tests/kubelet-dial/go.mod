module rdma-host-device/tests/kubelet-dial

// grpc-go 1.58 builds with Debian 12's Go 1.19 as well as with newer Go; like newer grpc-go
// (1.83 checked), it names a dialled socket's path, Huffman-coded, as :authority.
go 1.19

require google.golang.org/grpc v1.58.3

require (
	github.com/golang/protobuf v1.5.3 // indirect
	golang.org/x/net v0.12.0 // indirect
	golang.org/x/sys v0.10.0 // indirect
	golang.org/x/text v0.11.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230711160842-782d3b101e98 // indirect
	google.golang.org/protobuf v1.31.0 // indirect
)
