#!/bin/bash
# Entry point of the local MariaDB image (notiflow/mariadb:local), for the
# local overlay's StatefulSet. Runs as a non-root user with a read-only root
# filesystem: the data directory and /tmp are volumes.
#
#   MYSQL_DATABASE, MYSQL_USER  the database and the user given all rights
#                               on it (defaults notiflow, notiflow)
#   MYSQL_PASSWORD              that user's password (required)
#   MYSQL_DATA                  data directory (default /var/lib/mysql/data);
#                               on first start it is filled from the system
#                               tables the image was built with
#   MYSQL_BUFFER_POOL           InnoDB buffer pool (default 256M)
set -euo pipefail

db=${MYSQL_DATABASE:-notiflow}
user=${MYSQL_USER:-notiflow}
password=${MYSQL_PASSWORD:?MYSQL_PASSWORD is required}
data=${MYSQL_DATA:-/var/lib/mysql/data}
case $db$user in *[!A-Za-z0-9_]*)
	echo "mariadb-start: MYSQL_DATABASE and MYSQL_USER take letters, digits and _ only" >&2
	exit 2
	;;
esac

if [[ ! -d $data/mysql ]]; then
	mkdir -p "$data"
	cp -R /usr/share/notiflow/mariadb-initdb/. "$data/"
fi
# Run at every start, so a changed password takes effect; the file is
# readable by this user only and lives on the /tmp volume.
umask 077
escaped=${password//\\/\\\\}
escaped=${escaped//\'/\\\'}
cat >/tmp/init.sql <<SQL
CREATE DATABASE IF NOT EXISTS \`$db\`;
CREATE USER IF NOT EXISTS '$user'@'%' IDENTIFIED BY '$escaped';
ALTER USER '$user'@'%' IDENTIFIED BY '$escaped';
GRANT ALL PRIVILEGES ON \`$db\`.* TO '$user'@'%';
SQL
exec /usr/sbin/mariadbd --no-defaults --datadir="$data" --tmpdir=/tmp \
	--socket=/tmp/mysqld.sock --pid-file=/tmp/mariadbd.pid --port=3306 --bind-address=0.0.0.0 \
	--skip-name-resolve --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
	--max-connections=500 --innodb-buffer-pool-size="${MYSQL_BUFFER_POOL:-256M}" \
	--init-file=/tmp/init.sql
