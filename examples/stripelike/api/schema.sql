CREATE TABLE IF NOT EXISTS customers (
    id text PRIMARY KEY,
    email text,
    created bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS charges (
    id text PRIMARY KEY,
    amount bigint NOT NULL,
    currency text NOT NULL,
    customer text,
    status text NOT NULL,
    created bigint NOT NULL
);
