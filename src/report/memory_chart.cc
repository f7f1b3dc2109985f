#include "memfit/report/memory_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "memfit/core/bytes.h"
#include "memfit/core/json.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

// Inline <script> data must neither close the script element ("</script>") nor open an HTML comment
// ("<!--") that would swallow the close: every '<' is written as the JSON escape \u003c ('<' only ever
// appears inside JSON strings, where the escape means the same character).
std::string script_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const char* kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}
#subtitle{color:#555;margin:0 0 12px}
#chart{position:relative}
svg{background:#fafafa;border:1px solid #ddd}
.axis text{font-size:11px;fill:#444}
.axis line,.axis path{stroke:#999}
.limit{stroke-dasharray:6 4;stroke-width:1.5}
.limit-label{font-size:11px}
#peak-marker line{stroke:#c00;stroke-width:1.5}
#peak-marker text{fill:#c00;font-size:12px;font-weight:600}
#legend{margin:8px 0;display:flex;flex-wrap:wrap;gap:14px}
.legend-item{display:flex;align-items:center;gap:6px}
.swatch{width:14px;height:14px;border-radius:2px;display:inline-block}
#tooltip{position:absolute;pointer-events:none;background:#fff;border:1px solid #999;padding:6px 8px;font-size:12px;
  box-shadow:0 2px 6px rgba(0,0,0,.2);display:none;max-width:560px;white-space:nowrap}
table{border-collapse:collapse;margin-top:12px}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;font-size:12px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
</style></head><body>
<h1 id="title"></h1><p id="subtitle"></p>
<div id="legend"></div>
<div id="chart"><svg id="svg" width="1100" height="440" role="img"></svg><div id="tooltip"></div></div>
<h2 style="font-size:16px;margin:18px 0 0">Live at the peak</h2>
<table id="peak-live"><thead><tr><th class="num">count</th><th class="num">each</th><th class="num">total</th>
<th>shape</th><th>op</th></tr></thead><tbody></tbody></table>
<script type="application/json" id="data">@DATA@</script>
<script>
(function(){
const D=JSON.parse(document.getElementById('data').textContent);
const COLORS=['#4e79a7','#f28e2b','#59a14f','#e15759','#76b7b2','#edc948','#b07aa1','#ff9da7','#9c755f','#bab0ac'];
const LINE_COLORS=['#222','#c00','#0a7','#a50','#55a','#a0a'];
const NS='http://www.w3.org/2000/svg';
function fmt(b){const u=['B','KiB','MiB','GiB','TiB','PiB','EiB'];let i=0;while(b>=1024&&i<u.length-1){b/=1024;i++;}
  return (i?b.toFixed(2):b.toFixed(0))+u[i];}
/* Names, shapes and op names come from the user's files: text, never markup. */
function esc(s){return String(s).replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));}
function el(tag,attrs,parent){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);
  if(parent)parent.appendChild(e);return e;}
document.getElementById('title').textContent=D.title;
document.getElementById('subtitle').textContent=D.subtitle;
const legend=document.getElementById('legend');
D.categories.forEach((c,i)=>{const d=document.createElement('span');d.className='legend-item';d.dataset.category=c;
  d.innerHTML='<span class="swatch" style="background:'+COLORS[i%COLORS.length]+'"></span>';
  d.appendChild(document.createTextNode(c));legend.appendChild(d);});
const svg=document.getElementById('svg');
const W=+svg.getAttribute('width'),H=+svg.getAttribute('height'),L=80,R=190,T=16,B=40;
const n=D.columns.length,xEnd=Math.max(D.xEnd,1);
let yMax=D.peak.bytes;D.lines.forEach(l=>{yMax=Math.max(yMax,l.bytes);});yMax=Math.max(yMax*1.06,1);
const sx=x=>L+(W-L-R)*x/xEnd,sy=y=>H-B-(H-T-B)*y/yMax;
const axis=el('g',{class:'axis'},svg);
el('line',{x1:L,y1:H-B,x2:W-R,y2:H-B},axis);el('line',{x1:L,y1:T,x2:L,y2:H-B},axis);
for(let k=0;k<=5;k++){const y=yMax*k/5;el('line',{x1:L-4,y1:sy(y),x2:L,y2:sy(y)},axis);
  const t=el('text',{x:L-6,y:sy(y)+4,'text-anchor':'end'},axis);t.textContent=fmt(y);}
for(let k=0;k<=5;k++){const x=xEnd*k/5;const t=el('text',{x:sx(x),y:H-B+16,'text-anchor':'middle'},axis);
  t.textContent=Math.round(x);}
const xl=el('text',{x:(L+W-R)/2,y:H-6,'text-anchor':'middle'},axis);xl.textContent=D.xLabel;
const series=el('g',{id:'series'},svg);
const base=new Float64Array(n);
D.categories.forEach((c,ci)=>{const v=D.series[ci];let top='',bot='';
  for(let i=0;i<n;i++){const x0=sx(D.columns[i]),x1=sx(i+1<n?D.columns[i+1]:xEnd);const y=base[i]+v[i];
    top+=(i?'L':'M')+x0.toFixed(1)+','+sy(y).toFixed(1)+'L'+x1.toFixed(1)+','+sy(y).toFixed(1);}
  for(let i=n-1;i>=0;i--){const x0=sx(D.columns[i]),x1=sx(i+1<n?D.columns[i+1]:xEnd);
    bot+='L'+x1.toFixed(1)+','+sy(base[i]).toFixed(1)+'L'+x0.toFixed(1)+','+sy(base[i]).toFixed(1);base[i]+=v[i];}
  el('path',{class:'series','data-category':c,d:top+bot+'Z',fill:COLORS[ci%COLORS.length],'fill-opacity':0.85},series);});
const lines=el('g',{id:'limits'},svg);
const order=D.lines.map((l,i)=>i).sort((a,b)=>D.lines[b].bytes-D.lines[a].bytes);let lastY=-1e9;
order.forEach(i=>{const l=D.lines[i],y=sy(l.bytes),col=LINE_COLORS[i%LINE_COLORS.length];
  el('line',{class:'limit',x1:L,y1:y,x2:W-R,y2:y,stroke:col,'data-label':l.label},lines);
  const ly=Math.max(y+4,lastY+13);lastY=ly;  /* labels of close lines stack instead of overlapping */
  const t=el('text',{class:'limit-label',x:W-R+4,y:ly,fill:col},lines);t.textContent=l.label+' '+fmt(l.bytes);});
const pk=el('g',{id:'peak-marker','data-bytes':D.peak.bytes,'data-x':D.peak.x},svg);
el('line',{x1:sx(D.peak.x),y1:T,x2:sx(D.peak.x),y2:H-B},pk);
const pt=el('text',{x:Math.min(sx(D.peak.x)+4,W-R-150),y:T+12},pk);pt.textContent='peak '+fmt(D.peak.bytes)+' at '+D.peak.x;
const tb=document.querySelector('#peak-live tbody');
D.peak.rows.forEach(r=>{const tr=document.createElement('tr');
  [r.count,fmt(r.each),fmt(r.total),r.shape,r.op].forEach((v,i)=>{const td=document.createElement('td');
    if(i<3)td.className='num';td.textContent=v;tr.appendChild(td);});tb.appendChild(tr);});
const tip=document.getElementById('tooltip'),Bf=D.buffers;
svg.addEventListener('mousemove',ev=>{const r=svg.getBoundingClientRect();const px=ev.clientX-r.left;
  if(px<L||px>W-R){tip.style.display='none';return;}const x=(px-L)/(W-L-R)*xEnd;const live=[];
  for(let i=0;i<Bf.start.length;i++)if(Bf.start[i]<=x&&x<=Bf.end[i]+1)live.push(i);
  live.sort((a,b)=>Bf.bytes[b]-Bf.bytes[a]);let total=0;live.forEach(i=>total+=Bf.bytes[i]);
  let h='<b>'+esc(D.xLabel)+' '+Math.floor(x)+'</b>: '+fmt(total)+' in the '+live.length+' largest buffers live<br>';
  live.slice(0,8).forEach(i=>{h+='<span class="swatch" style="width:9px;height:9px;background:'+
    COLORS[Bf.cat[i]%COLORS.length]+'"></span> '+esc(Bf.name[i])+' '+fmt(Bf.bytes[i])+' '+esc(Bf.shape[i])+' '+
    esc(Bf.op[i])+'<br>';});
  tip.innerHTML=h;tip.style.display='block';tip.style.left=(px+14)+'px';tip.style.top=(ev.clientY-r.top+10)+'px';});
svg.addEventListener('mouseleave',()=>{tip.style.display='none';});
document.body.dataset.renderMs=Math.round(performance.now());
document.body.dataset.rendered='yes';
})();
</script></body></html>
)HTML";

}  // namespace

std::string render_html(const MemoryChart& chart, const ChartOptions& options) {
  const size_t nc = std::max<size_t>(chart.categories.size(), 1);
  uint64_t x_end = 1;
  for (const ChartBuffer& b : chart.buffers) x_end = std::max(x_end, b.end + 1);
  // Sweep: +bytes at start, -bytes after end.
  struct Event {
    uint64_t x;
    int64_t delta;
    uint32_t cat;
  };
  std::vector<Event> events;
  events.reserve(2 * chart.buffers.size());
  for (const ChartBuffer& b : chart.buffers) {
    const uint32_t cat = b.category < nc ? b.category : 0;
    events.push_back({b.start, static_cast<int64_t>(b.bytes), cat});
    events.push_back({b.end + 1, -static_cast<int64_t>(b.bytes), cat});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.x < b.x; });
  const uint64_t width =
      std::max<uint64_t>(1, (x_end + options.max_points - 1) / std::max<size_t>(options.max_points, 1));
  const size_t columns = static_cast<size_t>((x_end + width - 1) / width);
  std::vector<uint64_t> best_total(columns, 0);
  std::vector<std::vector<uint64_t>> series(nc, std::vector<uint64_t>(columns, 0));
  std::vector<int64_t> live(nc, 0);
  int64_t total = 0;
  uint64_t peak_bytes = 0, peak_x = 0;
  for (size_t i = 0; i < events.size();) {
    const uint64_t x = events[i].x;
    for (; i < events.size() && events[i].x == x; ++i) {
      live[events[i].cat] += events[i].delta;
      total += events[i].delta;
    }
    const uint64_t next = i < events.size() ? events[i].x : x_end;
    if (x >= x_end) break;
    const uint64_t t = static_cast<uint64_t>(std::max<int64_t>(total, 0));
    if (t > peak_bytes) {
      peak_bytes = t;
      peak_x = x;
    }
    // This state holds on [x, next): it is every covered column's maximum candidate.
    for (size_t col = static_cast<size_t>(x / width); col < columns && col * width < next; ++col) {
      if (t > best_total[col] || (t == best_total[col] && t == 0)) {
        best_total[col] = t;
        for (size_t c = 0; c < nc; ++c) series[c][col] = static_cast<uint64_t>(std::max<int64_t>(live[c], 0));
      }
    }
  }
  // What is live at the peak, by op and shape.
  std::map<std::pair<std::string, std::string>, std::tuple<uint64_t, uint64_t, uint64_t>> groups;
  for (const ChartBuffer& b : chart.buffers) {
    if (b.start > peak_x || b.end < peak_x) continue;
    auto& [count, each, sum] = groups[{b.op_name.empty() ? b.name : b.op_name, b.shape}];
    ++count;
    each = std::max(each, b.bytes);
    sum += b.bytes;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, std::tuple<uint64_t, uint64_t, uint64_t>>> rows(
      groups.begin(), groups.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::get<2>(a.second) > std::get<2>(b.second);
  });
  if (rows.size() > options.peak_rows) rows.resize(options.peak_rows);
  // Hover data: the largest buffers.
  std::vector<size_t> order(chart.buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return chart.buffers[a].bytes > chart.buffers[b].bytes; });
  if (order.size() > options.max_buffers) order.resize(options.max_buffers);
  std::sort(order.begin(), order.end());

  Json data;
  data["title"] = chart.title;
  data["subtitle"] = chart.subtitle;
  data["xLabel"] = chart.x_label;
  data["xEnd"] = x_end;
  data["categories"] = chart.categories.empty() ? std::vector<std::string>{"live"} : chart.categories;
  Json cols = Json::array();
  for (size_t col = 0; col < columns; ++col) cols.push_back(col * width);
  data["columns"] = cols;
  data["series"] = series;
  Json lines = Json::array();
  for (const ChartLine& l : chart.lines) lines.push_back({{"label", l.label}, {"bytes", l.bytes}});
  data["lines"] = lines;
  Json peak_rows = Json::array();
  for (const auto& [key, value] : rows)
    peak_rows.push_back({{"count", std::get<0>(value)},
                         {"each", std::get<1>(value)},
                         {"total", std::get<2>(value)},
                         {"op", key.first},
                         {"shape", key.second}});
  data["peak"] = {{"x", peak_x}, {"bytes", peak_bytes}, {"rows", peak_rows}};
  Json start = Json::array(), end = Json::array(), bytes = Json::array(), cat = Json::array(),
       name = Json::array(), shape = Json::array(), op = Json::array();
  for (size_t i : order) {
    const ChartBuffer& b = chart.buffers[i];
    start.push_back(b.start);
    end.push_back(b.end);
    bytes.push_back(b.bytes);
    cat.push_back(b.category);
    name.push_back(b.name);
    shape.push_back(b.shape);
    op.push_back(b.op_name);
  }
  data["buffers"] = {{"start", start}, {"end", end},     {"bytes", bytes}, {"cat", cat},
                     {"name", name},   {"shape", shape}, {"op", op}};
  std::string page = kPage;
  const std::string json = script_safe(json_text(data));
  // Both places are found in the template before either is filled, the later one filled first: a title
  // holding "@DATA@" (a file name can) must stay text, not receive the data (found by the writers fuzzer).
  const size_t title_at = page.find("@TITLE@");
  const size_t data_at = page.find("@DATA@");
  page.replace(data_at, 6, json);
  page.replace(title_at, 7, html_escape(valid_utf8(chart.title)));
  return page;
}

MemoryChart chart_from_timeline(const Timeline& timeline, const std::string& title) {
  MemoryChart chart;
  chart.title = title;
  chart.x_label = "event";
  // One category per tag that an allocation carries, in the tags' order.
  std::vector<uint32_t> category_of(timeline.tags.size(), UINT32_MAX);
  for (const TraceEvent& e : timeline.events)
    if (e.kind == EventKind::kAlloc && e.tag < category_of.size()) category_of[e.tag] = 0;
  for (uint32_t tag = 0; tag < category_of.size(); ++tag) {
    if (category_of[tag] == UINT32_MAX) continue;
    category_of[tag] = static_cast<uint32_t>(chart.categories.size());
    chart.categories.push_back(timeline.tags[tag]);
  }
  if (chart.categories.empty()) chart.categories.push_back("live");
  if (chart.categories.size() == 1 && chart.categories[0] == "(untagged)") chart.categories[0] = "live";
  const bool labelled = timeline.labels.size() == timeline.buffer_count;
  std::vector<size_t> open(timeline.buffer_count, SIZE_MAX);
  for (size_t i = 0; i < timeline.events.size(); ++i) {
    const TraceEvent& e = timeline.events[i];
    if (e.buffer >= open.size()) open.resize(e.buffer + 1, SIZE_MAX);
    if (e.kind == EventKind::kAlloc) {
      open[e.buffer] = chart.buffers.size();
      ChartBuffer b;
      const bool tagged = e.tag < timeline.tags.size() && category_of[e.tag] != UINT32_MAX;
      if (labelled && e.buffer < timeline.labels.size()) {
        const BufferLabel& l = timeline.labels[e.buffer];
        b.name = l.name;
        b.shape = l.shape;
        b.op_name = l.op_name;
      } else {
        b.name = fmt::format("buffer {}", e.buffer);
        b.op_name = tagged && e.tag != 0 ? timeline.tags[e.tag] : "";
        b.shape = fmt::format("stream {}", e.stream);
      }
      b.category = tagged ? category_of[e.tag] : 0;
      b.bytes = e.size_bytes;
      b.start = i;
      b.end = timeline.events.size();
      chart.buffers.push_back(std::move(b));
    } else if (open[e.buffer] != SIZE_MAX) {
      chart.buffers[open[e.buffer]].end = i > 0 ? i - 1 : 0;
      open[e.buffer] = SIZE_MAX;
    }
  }
  return chart;
}

}  // namespace memfit
