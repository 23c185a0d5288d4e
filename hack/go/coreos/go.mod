// Wrapper module: builds butane and ignition-validate from the Go module proxy (butane's own
// `go install ...@version` needs the proxy's version list, which is not reachable here).
module nodeagent.local/hack/go/coreos

go 1.26.0

require (
	github.com/coreos/butane v0.29.0
	github.com/coreos/ignition/v2 v2.26.0
)

require (
	github.com/aws/aws-sdk-go-v2 v1.41.1 // indirect
	github.com/clarketm/json v1.17.1 // indirect
	github.com/coreos/go-json v0.0.0-20230131223807-18775e0fb4fb // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/coreos/vcontext v0.0.0-20230201181013-d72178a18687 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
	github.com/vincent-petithory/dataurl v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
