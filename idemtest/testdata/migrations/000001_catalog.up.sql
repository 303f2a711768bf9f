CREATE SCHEMA catalog;
CREATE TABLE catalog.courses (id bigint PRIMARY KEY, title text NOT NULL, proctored boolean NOT NULL);
