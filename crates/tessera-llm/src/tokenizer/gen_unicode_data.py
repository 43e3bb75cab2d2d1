# Generates unicode_data.rs (category ranges and whitespace) from llama.cpp's
# src/unicode-data.cpp:
#   python3 gen_unicode_data.py PATH/TO/unicode-data.cpp OUT.rs
import re,sys
src=open(sys.argv[1]).read()
body=src.split('unicode_ranges_flags = {')[1].split('};')[0]
pairs=[(int(a,16),int(b,16)) for a,b in re.findall(r'\{0x([0-9A-Fa-f]+), 0x([0-9A-Fa-f]+)\}',body)]
assert pairs[0][0]==0 and pairs[-1][0]==0x110000
assert all(p[1]!=0 for p in pairs[:-1]), [p for p in pairs[:-1] if p[1]==0][:5]
assert all(p[1]&0xFF00==0 for p in pairs)
ws=src.split('unicode_set_whitespace = {')[1].split('};')[0]
ws=[int(x,16) for x in re.findall(r'0x([0-9A-Fa-f]+)',ws)]
out=[]
out.append('//! Unicode category flags of llama.cpp (`src/unicode-data.cpp`), generated from it:')
out.append('//! the start of each range with its category bits (a range ends where the next')
out.append('//! begins), and the code points that count as whitespace (`\\s`).')
out.append('//! Generated data; do not edit by hand.')
out.append('')
out.append('/// `(first code point, category flags)`, ascending; the last entry is `0x110000`.')
out.append('#[rustfmt::skip]')
out.append('pub(super) static RANGES: [(u32, u8); %d] = [' % len(pairs))
line=''
for i,(a,b) in enumerate(pairs):
    s='(0x%X,%d),'%(a,b)
    if len(line)+len(s)>98:
        out.append('    '+line.rstrip()); line=''
    line+=s
out.append('    '+line.rstrip())
out.append('];')
out.append('')
out.append('/// Code points that are whitespace (`\\s`), ascending.')
out.append('#[rustfmt::skip]')
out.append('pub(super) static WHITESPACE: [u32; %d] = [' % len(ws))
ws.sort()
out.append('    '+', '.join('0x%X'%w for w in ws[:12])+',')
out.append('    '+', '.join('0x%X'%w for w in ws[12:])+',')
out.append('];')
open(sys.argv[2],'w').write('\n'.join(out)+'\n')
print(len(pairs), len(out))
