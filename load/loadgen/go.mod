module floe/loadgen

go 1.22
