module goro.local/bench/go

go 1.19
