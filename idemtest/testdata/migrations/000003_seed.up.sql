INSERT INTO catalog.courses VALUES (1, 'Databases', true);
