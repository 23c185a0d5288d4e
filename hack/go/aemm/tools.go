//go:build tools

// Package tools pins amazon-ec2-metadata-mock, the mock of EC2's instance metadata
// service that aws-node-termination-handler's own end-to-end tests run against; the
// cloud-warning tests serve it on loopback (hack/build-aemm.sh).
package tools

import _ "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock"
