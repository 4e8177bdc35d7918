package api

import (
	_ "embed"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoDescriptors is the FileDescriptorSet of proto/coord/v1 with its
// source info, comments included (scripts/genproto.sh writes it; the
// generated Go code keeps no comments).
//
//go:embed protodesc.binpb
var protoDescriptors []byte

// registerReflection serves gRPC reflection (v1 and v1alpha) with the
// protos' comments: grpcurl describe shows them. Files the set lacks
// (health, reflection itself) come from the Go registry.
func registerReflection(s *grpc.Server) {
	opts := reflection.ServerOptions{Services: s, DescriptorResolver: commentedFiles()}
	reflectionv1alpha.RegisterServerReflectionServer(s, reflection.NewServer(opts))
	reflectionv1.RegisterServerReflectionServer(s, reflection.NewServerV1(opts))
}

// commentedFiles resolves from protoDescriptors first, then the registry
// (the registry alone when the set cannot be read: reflection without
// comments).
func commentedFiles() protodesc.Resolver {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(protoDescriptors, &set); err != nil {
		return protoregistry.GlobalFiles
	}
	own, err := protodesc.NewFiles(&set)
	if err != nil {
		return protoregistry.GlobalFiles
	}
	return firstOf{own}
}

// firstOf resolves a name with its own files, else the global registry.
type firstOf struct{ own *protoregistry.Files }

func (r firstOf) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.own.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r firstOf) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.own.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}
