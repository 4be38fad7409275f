module github.com/notiflow/notiflow/bench

go 1.26.0
