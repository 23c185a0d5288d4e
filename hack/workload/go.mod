module nodeagent.local/workload

go 1.22
