-- One run of each batch of pruners.sql, which includes this file twice.
:setup
VACUUM ANALYZE pruners_r; CHECKPOINT;
CALL pruners_run('range', :'range', :'bound');
:setup
VACUUM ANALYZE pruners_r; CHECKPOINT;
CALL pruners_run('SKIP LOCKED, primary key', :'bykey');
:setup
VACUUM ANALYZE pruners_r; CHECKPOINT;
CALL pruners_run('SKIP LOCKED, ctid', :'byctid');
