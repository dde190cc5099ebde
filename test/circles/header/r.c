void p_back(void);

void r_work(int x)
{
    if (x) {
        p_back();
    }
}
