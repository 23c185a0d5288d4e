// Command csi-mock serves Kubernetes' own mock CSI driver (the one its e2e csi-mock tests
// use) on a unix socket and, with -registration, registers it with the kubelet the way
// node-driver-registrar would (that image is not reachable here: hack/csi/build.sh).
//
// One binary, two places: beside the control plane as the controller the external-attacher
// calls, and as a service on each real node as the node plugin. The mock's node ID is its
// driver name and ControllerPublish refuses any other, so every instance uses the same
// driver name and the attach path still runs end to end (VolumeAttachments are named per
// Kubernetes node, not per CSI node ID).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	refused        chan string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(
	_ context.Context, s *registerapi.RegistrationStatus,
) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		// As node-driver-registrar does: exit, so that the unit's restart registers again
		// (the kubelet does not retry a refused plugin by itself, e.g. one that registered
		// before its Node object existed).
		select {
		case r.refused <- s.Error:
		default:
		}
	} else {
		fmt.Fprintln(os.Stderr, "csi-mock: registered with the kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// listen replaces a stale socket left by a previous run (a rebooted node keeps its root).
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return net.Listen("unix", path)
}

func run() error {
	name := flag.String("driver-name", "", "the CSI driver name (also the mock's node ID)")
	endpoint := flag.String("endpoint", "", "the CSI socket to serve")
	reg := flag.String("registration", "", "the kubelet registration socket to serve (node plugin only)")
	flag.Parse()
	if *name == "" || *endpoint == "" {
		return fmt.Errorf("-driver-name and -endpoint are required")
	}
	l, err := listen(*endpoint)
	if err != nil {
		return err
	}
	mock := service.New(service.Config{DriverName: *name})
	d := driver.NewCSIDriver(&driver.CSIDriverServers{Controller: mock, Identity: mock, Node: mock})
	if err := d.Start(l, nil); err != nil {
		return err
	}
	defer d.Stop()
	refused := make(chan string, 1)
	if *reg != "" {
		rl, err := listen(*reg)
		if err != nil {
			return err
		}
		srv := grpc.NewServer()
		registerapi.RegisterRegistrationServer(srv, &registration{name: *name, endpoint: *endpoint, refused: refused})
		go func() { _ = srv.Serve(rl) }()
		defer srv.Stop()
	}
	fmt.Fprintf(os.Stderr, "csi-mock: %s serving on %s\n", *name, *endpoint)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return nil
	case why := <-refused:
		return fmt.Errorf("the kubelet refused the registration: %s", why)
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock: %v\n", err)
		os.Exit(1)
	}
}
