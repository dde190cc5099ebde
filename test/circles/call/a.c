/* Fixture: a.c and b.c call each other (the planted circle) */
void b_serve(int n);

void a_start(int n)
{
    if (n > 0) {
        b_serve(n - 1);
    }
}

/* a static function of the same name in another file is not b's */
static void b_helper(void)
{
}

void a_done(void)
{
    b_helper();
}
