/* Fixture: the other half of the circle */
void a_done(void);

void b_serve(int n)
{
    if (n == 0) {
        a_done();
    }
}

static void b_helper(void)
{
}
